"""Fuzzing the spec loader: any file and any overrides give an `ExperimentSpec` or a `SpecError`.

A spec is untrusted input, so whatever a file holds (random YAML built from spec keys and odd
scalars, random text, random bytes) and whatever overrides come with it, `load_spec` either returns a
spec that round-trips through `spec_to_yaml`, or raises a `SpecError` whose issues each have a text
path and a message. Any other exception, or a load that does not finish, is a bug. The concrete
inputs the fuzzer found are kept below as plain regression tests.

Runs are deterministic (`derandomize`, no example database) and bounded (about 300 examples).
"""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pats.errors import SpecError
from pats.spec import ExperimentSpec, load_spec, loader, spec_to_yaml

GOOD = "name: x\nenvironment: {kind: twx}\n"
LIMIT_S = 60  # a hang guard, not a speed test: the suite may run niced beside training on 2 cores

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=3000,  # ms per example; generous because CI machines are shared
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=False,
)

SPEC_KEYS = [
    "name", "seed", "environment", "kind", "game", "params", "max_turns", "policy", "model", "lora",
    "rank", "action", "scaffold", "mode", "cards", "probe_fraction", "initial_bank", "budget",
    "judge", "reviser", "llm", "api_key_env", "trainer", "backend", "steps", "group_size", "lr",
    "eval", "every", "logging", "root", "wandb", "defaults", "retriever", "train_data", "eval_data",
]  # fmt: skip
TAGS = ["twx", "alfworld", "webshop", "search_qa", "stats", "llm", "rules", "local", "verl", "bm25",
        "http", "none", "static", "grow", "pats", "outcome", "expert", "openai/gpt-4o-mini"]  # fmt: skip

dotted = st.lists(st.sampled_from(SPEC_KEYS), min_size=1, max_size=3).map(".".join)
interpolations = st.one_of(
    dotted.map(lambda k: "${" + k + "}"),
    st.sampled_from(["${", "${}", "${oc.env:PATS_UNSET_VAR}", "${oc.env:HOME,x}", "${a.b", "$${x}",
                     "${oc.decode:'[1, 2'}", "${oc.create:{a: 1}}", "???", "${..}", "${name}-2"]),
    st.text(max_size=8).map(lambda t: "${" + t + "}"),
)  # fmt: skip
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(TAGS),
    interpolations,
)
REAL_PATHS = [
    "name", "seed", "environment", "environment.kind", "environment.game", "environment.params",
    "environment.max_turns", "environment.retriever", "environment.retriever.kind",
    "environment.train_data", "environment.eval_data", "policy.model", "policy.lora",
    "policy.lora.rank", "policy.action", "policy.temperature", "scaffold", "scaffold.mode",
    "scaffold.cards", "scaffold.probe_fraction", "scaffold.privileged", "scaffold.initial_bank",
    "scaffold.budget.max_entries", "judge", "judge.kind", "judge.llm", "judge.llm.model",
    "judge.llm.api_key_env", "judge.revise_threshold", "reviser.kind", "reviser.llm.model",
    "trainer", "trainer.backend", "trainer.steps", "trainer.group_size", "trainer.lr",
    "trainer.overrides", "eval.num_tasks", "eval.every", "logging.root", "logging.wandb", "defaults",
]  # fmt: skip
keys = st.one_of(st.sampled_from(SPEC_KEYS), st.sampled_from(SPEC_KEYS), st.text(max_size=10))
odd_keys = st.one_of(keys, st.integers(-3, 3), st.booleans(), st.none(), st.floats())
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(keys, inner, max_size=5),
        st.fixed_dictionaries({"kind": st.sampled_from(TAGS)}, optional={"llm": inner, "steps": inner}),
    ),
    max_leaves=25,
)


def good_with(edits: list[tuple[str, object]]) -> dict:
    """A good spec with each dotted path in `edits` set to its value (sections made as needed)."""
    doc: dict = {"name": "x", "environment": {"kind": "twx"}}
    for path, value in edits:
        *parents, last = path.split(".")
        node = doc
        for key in parents:
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[last] = value
    return doc


documents = st.one_of(
    # a good spec with a few real keys set to random values: fuzzes validation, not just parsing
    st.lists(
        st.tuples(st.sampled_from(REAL_PATHS), st.one_of(st.sampled_from(TAGS), scalars, trees)),
        max_size=4,
    ).map(good_with),
    st.dictionaries(odd_keys, trees, max_size=8),
    st.fixed_dictionaries(
        {"name": st.one_of(st.just("x"), scalars), "environment": trees},
        optional={k: trees for k in SPEC_KEYS if k not in {"name", "environment"}},
    ),
    trees,
)
override_values = st.one_of(scalars.map(str), st.sampled_from(["[1, 2", "{a: 1}", "[]", "'", "null"]))
any_override = st.one_of(
    st.tuples(dotted, override_values).map("=".join),
    st.tuples(st.text(max_size=12), override_values).map("=".join),
    st.sampled_from(["", "=", "=1", "trainer.steps", ".a=1", "a..b=1", "a.=1", " =1", "a.b=c=d",
                     "trainer=3", "trainer.steps=", "environment.kind=nope", "name=${oc.env:X}"]),
    st.text(max_size=12),
)  # fmt: skip
real_override = st.tuples(
    st.sampled_from(REAL_PATHS),
    st.one_of(st.sampled_from(TAGS), st.integers(-2, 200).map(str), st.floats(-1, 2).map(str)),
).map("=".join)
overrides = st.one_of(st.just([]), st.lists(real_override, max_size=3), st.lists(any_override, max_size=4))


@contextlib.contextmanager
def time_limit(seconds: int):
    """Fail (instead of hanging the suite) when a load does not finish."""

    def stop(signum, frame):
        where = f"{frame.f_code.co_name} in {frame.f_code.co_filename}" if frame else "unknown"
        raise TimeoutError(f"load_spec did not finish in {seconds} s (interrupted in {where})")

    if not hasattr(signal, "SIGALRM"):  # not on Windows; hypothesis' deadline still applies
        yield
        return
    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    except TimeoutError as err:
        # Raised afresh here: the interrupted frame can carry no line number (Python 3.11), and
        # pytest's report of that traceback then fails with INTERNALERROR, ending the whole session.
        raise TimeoutError(str(err)) from None
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def check_load(path: Path, extra: list[str] = ()) -> ExperimentSpec | SpecError:
    """Load `path`; assert the result is a round-tripping spec or a well-formed SpecError."""
    with time_limit(LIMIT_S):
        try:
            spec = load_spec(path, extra)
        except SpecError as err:
            assert err.issues, "a SpecError without issues"
            for issue in err.issues:
                assert isinstance(issue.path, str) and isinstance(issue.source, str), issue
                assert isinstance(issue.message, str) and issue.message.strip(), issue
            assert isinstance(str(err), str)
            return err
        assert isinstance(spec, ExperimentSpec)
        again = path.with_name("shown.yaml")
        again.write_text(spec_to_yaml(spec), encoding="utf-8")
        assert load_spec(again) == spec
        return spec


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(FUZZ, max_examples=140)
@given(doc=documents, extra=overrides)
def test_random_yaml_documents_and_overrides(folder, doc, extra):
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    check_load(path, extra)


@settings(FUZZ, max_examples=60)
@given(extra=overrides)
def test_random_overrides_on_a_good_spec(folder, extra):
    path = folder / "good.yaml"
    path.write_text(GOOD, encoding="utf-8")
    check_load(path, extra)


yaml_text = st.lists(
    st.one_of(
        st.sampled_from(list("{}[]:,-&*!|>'\"%@`#?\n\t =$.") + ["  ", "\n  ", "<<", "!!", "- "]),
        st.sampled_from(["name", "environment", "kind", "twx", "trainer", "defaults", "&a", "*a", "x"]),
        st.characters(),
    ),
    max_size=40,
).map("".join)


@settings(FUZZ, max_examples=60)
@given(text=yaml_text)
def test_random_text_as_yaml_file(folder, text):
    path = folder / "t.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check_load(path)


@settings(FUZZ, max_examples=40)
@given(data=st.one_of(st.binary(max_size=80), st.binary(max_size=20).map(lambda b: GOOD.encode() + b)))
def test_random_bytes_as_yaml_file(folder, data):
    path = folder / "b.yaml"
    path.write_bytes(data)
    check_load(path)


REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(str(p.relative_to(REPO / "experiments")) for p in (REPO / "experiments").rglob("*.yaml"))


@pytest.fixture(scope="module")
def experiments(tmp_path_factory) -> Path:
    """A copy of experiments/, so that mutated specs still find their `defaults:` bases."""
    folder = tmp_path_factory.mktemp("experiments")
    for name in SHIPPED:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes((REPO / "experiments" / name).read_bytes())
    return folder


edits = st.lists(
    st.tuples(st.floats(0, 1), st.integers(0, 4), st.sampled_from(["", ":", " ", "\n", "-", "'", "&a ", "*a",
                                                                    "{", "]", "${", "!!", "0", "\u00e9"])),
    min_size=1,
    max_size=3,
)  # fmt: skip


@settings(FUZZ, max_examples=40)
@given(name=st.sampled_from(SHIPPED), changes=edits)
def test_mutated_shipped_specs(experiments, name, changes):
    """Shipped specs with a few characters deleted or inserted: near-valid files, deep in the loader."""
    text = (experiments / name).read_text(encoding="utf-8")
    for where, cut, insert in changes:
        at = int(where * len(text))
        text = text[:at] + insert + text[at + cut :]
    path = (experiments / name).with_name("mutated.yaml")
    path.write_text(text, encoding="utf-8")
    check_load(path)


# -- what the fuzzer found, as plain regression tests ------------------------------------------------


def issue_of(path: Path, extra: list[str] = ()):
    result = check_load(path, extra)
    assert isinstance(result, SpecError), result
    assert len(result.issues) == 1, result.issues
    return result.issues[0]


def test_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_bytes(b"name: x\nenvironment: {kind: \xff\xfe}\n")  # was UnicodeDecodeError
    assert issue_of(path).message == "not UTF-8 text (byte 0xff on line 2); save the file as UTF-8"


def test_unicode_digit_key(write):
    issue = issue_of(write("s.yaml", GOOD + "\u00b2: 1\n"))  # '²'.isdigit() but int('²') failed
    assert issue.path == "\u00b2" and issue.message.startswith("unknown key '\u00b2'")


@pytest.mark.parametrize("text", ["scaffold: &a {budget: *a}\n", "x: &a [1, *a]\n"])
def test_recursive_alias(write, text):
    issue = issue_of(write("s.yaml", GOOD + text))  # was RecursionError
    assert issue.message.startswith("line 3: an alias refers to the anchor it is inside")


def test_alias_bomb_is_refused_before_it_expands(write, monkeypatch):
    """Ten aliases per level, seven levels: 10**7 values once expanded (it used to hang). The
    refusal must come from the composed graph, before anything builds the expanded data."""
    lines = ["a0: &a0 {" + ", ".join(f"k{j}: 1" for j in range(10)) + "}"]
    for i in range(1, 7):
        lines.append(f"a{i}: &a{i} {{" + ", ".join(f"k{j}: *a{i - 1}" for j in range(10)) + "}")

    def expand(*args, **kwargs):
        raise AssertionError("the alias bomb reached yaml.safe_load, which expands it")

    monkeypatch.setattr(loader.yaml, "safe_load", expand)
    issue = issue_of(write("s.yaml", GOOD + "\n".join(lines) + "\n"))
    assert "aliases expand to more than 100000 values" in issue.message


@pytest.mark.parametrize("text", ["x: " + "[" * 2000 + "]" * 2000, "x: " + "{a: " * 400 + "1" + "}" * 400])
def test_deep_nesting(write, text):
    issue = issue_of(write("s.yaml", GOOD + text + "\n"))  # was RecursionError
    assert "nested more than 32 levels deep" in issue.message


def test_base_spec_name_too_long(write):
    issue = issue_of(write("s.yaml", "defaults: ['" + "a" * 300 + "']\n" + GOOD))  # was OSError
    assert issue.path == "defaults.0" and "not found" in issue.message


def test_defaults_that_multiply(write):
    """Each file lists the next ten times: 10**4 files to merge unless the chain is capped."""
    for i in range(4):
        write(f"b{i}.yaml", (f"defaults: [{', '.join([f'b{i + 1}.yaml'] * 10)}]\n" if i < 3 else "") + GOOD)
    issue = issue_of(write("s.yaml", "defaults: [b0.yaml]\n" + GOOD))
    assert issue.path == "defaults" and "more than 64 files" in issue.message


@pytest.mark.parametrize(
    ("text", "path", "start"),
    [
        ("seed: 2020-01-01\n", "seed", "YAML reads this as a date"),  # was "cannot resolve interpolation"
        ("seed: !!set {a, b}\n", "seed", "YAML reads this as a set"),
        ("name: !!binary eA==\n", "name", "YAML reads this as binary data"),  # was accepted as name 'x'
        ("null: 1\n", "None", "YAML reads the key None as null"),  # was "Incompatible key type"
        ("yes: 1\n", "True", "YAML reads the key True as a boolean"),
        (".nan: 1\n", "nan", "YAML reads the key nan as a number"),
    ],
)
def test_values_a_spec_cannot_hold(write, text, path, start):
    issue = issue_of(write("s.yaml", GOOD + text))
    assert (issue.path, issue.message[: len(start)]) == (path, start)
    assert issue.source.endswith("s.yaml:3")


def test_missing_tag_names_the_right_key(write):
    issue = issue_of(write("s.yaml", GOOD + "trainer: {backend: null}\n"))  # said "add kind:"
    assert (issue.path, issue.message) == (
        "trainer",
        "missing its backend; add backend: with one of: local, verl",
    )
    issue = issue_of(write("s.yaml", "name: x\nenvironment: {}\n"))
    assert issue.message == "missing its kind; add kind: with one of: twx, alfworld, webshop, search_qa"


@pytest.mark.parametrize(
    ("override", "path", "start"),
    [
        ("[=", "[", "unknown key '['"),  # was IndexError inside OmegaConf's dotlist key parser
        ("a..b=1", "a..b", "the key has an empty part between dots"),
        ("name='", "name", "cannot read the value (found unexpected end of stream)"),  # was ScannerError
        ("name=[1, 2", "name", "cannot read the value (expected ',' or ']'"),  # was ParserError
        ("name=\x1f", "name", "cannot read the value (unacceptable character #x001f"),  # was ReaderError
        ("name=!!binary eA==", "name", "YAML reads this as binary data"),
        ("name=" + "[" * 2000, "name", "nested more than 32 levels deep"),
        ("name=[&a [1, 1], &b [*a, *a], *b]", None, None),  # small aliases are fine (not a name, though)
    ],
)
def test_overrides_that_do_not_parse(write, override, path, start):
    result = check_load(write("s.yaml", GOOD), ["trainer.steps=3", override])
    assert isinstance(result, SpecError)
    (issue,) = result.issues
    if path is not None:
        assert (issue.path, issue.message[: len(start)]) == (path, start)
    assert issue.source.startswith("override '")


@pytest.mark.parametrize("ref", ["${v.k%d}", "${oc.select:v.k%d}", "${.k%d}"])
def test_interpolation_bomb_is_refused_before_resolving(write, ref, monkeypatch):
    """Each value refers to the next one twice: 2**40 characters once resolved (it used to run out
    of memory; found by reading the loader after the alias bomb)."""
    values = "".join(f"  k{i}: '{ref % (i + 1)}{ref % (i + 1)}'\n" for i in range(40))

    def resolve(*args, **kwargs):
        raise AssertionError("the interpolation bomb reached OmegaConf's resolver")

    monkeypatch.setattr(loader.OmegaConf, "to_container", resolve)
    issue = issue_of(write("s.yaml", GOOD + "v:\n" + values + "  k40: ab\n"))
    assert issue.message.startswith("interpolations would expand the spec to more than 1000000 characters")


def test_long_chain_of_references(write):
    """k0 refers to k1, which refers to k2, ... k1000: was a RecursionError out of the size check."""
    values = "".join(f"  k{i}: '${{v.k{i + 1}}}'\n" for i in range(1000))
    issue = issue_of(write("s.yaml", GOOD + "v:\n" + values + "  k1000: ab\n"))
    assert "interpolations refer to values that refer on, more than 50 levels deep" in issue.message
