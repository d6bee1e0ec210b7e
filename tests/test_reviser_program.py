"""The reviser's DSPy program: card names and back, the schema's distinct citations and gates, predict ->
check -> ask again inside one program run (and the review that logs it), the metric, and compiling,
saving and loading a program (refused when it does not fit the spec)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import jsonschema
import pytest
from dspy.utils import DummyLM

from pats.errors import SpecError
from pats.protocols import RefiningReviser
from pats.review import check_edits
from pats.reviser.bundles import SHIPPED, ReviserBundle, load, save
from pats.reviser.llm import (
    CardAliases,
    LLMReviser,
    ReviserSettings,
    edit_schema,
    load_reviser_prompt,
    reviser_probe,
)
from pats.reviser.program import (
    INPUT_FIELDS,
    attempt_score,
    check_meta,
    edit_metric,
    kinds_as_reference,
    load_program,
    meta_of,
    new_program,
)
from pats.spec.models import LLMReviserSpec, LLMSpec, ScaffoldSpec
from pats.types import AddEdit, Attempt, DeleteEdit, ReviewMode, UpdateEdit

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_llm_reviser import ASSESSMENT, CARDS, ENTRIES, prompt_of  # noqa: E402

BUNDLES = SHIPPED
TWC = [c for c in CARDS if c.task_type == "twc"]  # C1 outcome, C2 failure, C3 expert


def words(text: str) -> int:
    return len(text.split())


def check(edits, assessment, entries, cards):
    return check_edits(ScaffoldSpec(mode="pats"), edits, assessment, entries, cards, words)


def reviser(lm, check=check, attempts=2, **settings) -> LLMReviser:
    spec = LLMReviserSpec(
        llm=LLMSpec(model="openai/reviser", max_retries=1, backoff_s=0.0), attempts=attempts
    )
    return LLMReviser(spec, ReviserSettings(**{"min_citations": 2, **settings}), lm=lm, check=check)


# Cited in the order the cards are listed: the schema's way of saying "distinct" (cites_schema).
ADD_BY_NAMES = {
    "op": "ADD",
    "kind": "skill",
    "scope": "type:twc",
    "text": "Use 'take X'.",
    "cites": ["C1", "C2"],
}


# -- names, schema --------------------------------------------------------------------------------------


def test_card_names_go_out_and_ids_come_back():
    aliases = CardAliases(["c5-twc-1-outcome", "c5-twc-1-outcome-long", "c5-twc-1-failure"])
    edits = [AddEdit(kind="skill", scope="general", text="x", cites=("C3", "C1", "C9"))]
    assert aliases.to_ids(edits)[0].cites == ("c5-twc-1-failure", "c5-twc-1-outcome", "C9"), "unknown stays"
    assert aliases.to_names(aliases.to_ids(edits))[0].cites == ("C3", "C1", "C9")
    # the longer id first: "c5-twc-1-outcome" is a prefix of "c5-twc-1-outcome-long"
    assert aliases.in_text("cites c5-twc-1-outcome-long and c5-twc-1-outcome") == "cites C2 and C1"


async def test_an_answer_in_card_names_becomes_edits_citing_the_cards():
    lm = DummyLM([{"edits": [ADD_BY_NAMES]}])
    edits = await reviser(lm).revise(5, ASSESSMENT, CARDS, ENTRIES)
    assert edits == [
        AddEdit(kind="skill", scope="type:twc", text="Use 'take X'.", cites=(TWC[0].id, TWC[1].id))
    ]
    assert check(edits, ASSESSMENT, ENTRIES, CARDS) == []


def schema_of(**kw):
    args = {"min_citations": 2, "removal": True, "add_only": False, "card_ids": ["C1", "C2", "C3"]}
    return edit_schema(ReviewMode.EXPAND, "twc", TWC, ENTRIES, **{**args, **kw})


def test_task_scopes_and_plans_are_offered_only_with_task_plans():
    def scopes_and_kinds(schema):
        defs = [d for name, d in schema["$defs"].items() if name in ("skill", "mistake")]
        adds = [v["properties"] for d in defs for v in d.get("anyOf", [d])]
        return {s for a in adds for s in a["scope"]["enum"]}, {k for a in adds for k in a["kind"]["enum"]}

    scopes, kinds = scopes_and_kinds(schema_of())
    assert "task:twc-1" in scopes and "plan" in kinds
    scopes, kinds = scopes_and_kinds(schema_of(task_plans=False))
    assert scopes == {"general", "type:twc"} and kinds == {"skill", "mistake"}
    validator = jsonschema.Draft202012Validator(schema_of(task_plans=False))
    task_add = {**ADD_BY_NAMES, "scope": "task:twc-1"}
    assert validator.is_valid({"edits": [ADD_BY_NAMES]}) and not validator.is_valid({"edits": [task_add]})


def test_the_schema_refuses_one_card_cited_twice_and_the_validator_agrees():
    validator = jsonschema.Draft202012Validator(schema_of())
    twice = {**ADD_BY_NAMES, "cites": ["C2", "C2"]}
    backwards = {**ADD_BY_NAMES, "cites": ["C2", "C1"]}
    assert validator.is_valid({"edits": [ADD_BY_NAMES]}) and not validator.is_valid({"edits": [twice]})
    assert not validator.is_valid({"edits": [backwards]}), "the first citations come in the cards' order"
    edits = CardAliases([c.id for c in TWC]).to_ids([AddEdit(**twice)])
    assert any("distinct card(s)" in p for p in check(edits, ASSESSMENT, ENTRIES, CARDS))


def test_the_probe_sends_the_reviser_schema_under_the_run_settings():
    probe = reviser_probe(ReviserSettings(min_citations=2, task_plans=False))
    validator = jsonschema.Draft202012Validator(probe.schema)
    assert validator.is_valid(probe.answer) and probe.answer == {"edits": []}
    text = json.dumps(probe.schema)
    assert '"prefixItems"' in text and '"const": "C1"' in text and "task:" not in text
    assert "UPDATE" in text and "DELETE" in text, "every edit variant a REVISE review allows"


# -- predict, check, ask again ------------------------------------------------------------------------------


async def test_a_refused_answer_is_asked_again_with_its_problems_in_card_names():
    one_card = {**ADD_BY_NAMES, "cites": ["C2"]}
    lm = DummyLM([{"edits": [one_card]}, {"edits": [ADD_BY_NAMES]}])
    llm = reviser(lm)
    assert isinstance(llm, RefiningReviser)
    refinement = await llm.refine(5, ASSESSMENT, CARDS, ENTRIES)
    assert [bool(a.problems) for a in refinement.attempts] == [True, False] and refinement.accepted
    assert refinement.edits[0].cites == (TWC[0].id, TWC[1].id)
    second = prompt_of(lm, -1)
    assert "Your previous edit set was refused" in second and "cites 1 distinct card(s)" in second
    assert "C1" in second and TWC[0].id not in second, "feedback names cards as the prompt does"
    assert llm.usage().calls == 2, "two requests in one program run are two calls"


async def test_attempts_bound_the_answers_and_the_last_refusal_stands():
    one_card = {**ADD_BY_NAMES, "cites": ["C2"]}
    lm = DummyLM([{"edits": [one_card]}] * 3)
    refinement = await reviser(lm, attempts=3).refine(5, ASSESSMENT, CARDS, ENTRIES)
    assert len(refinement.attempts) == 3 and not refinement.accepted
    refinement = await reviser(DummyLM([{"edits": [one_card]}] * 3), attempts=1).refine(
        5, ASSESSMENT, CARDS, ENTRIES
    )
    assert len(refinement.attempts) == 1


async def test_the_review_asks_a_refining_reviser_once_and_logs_each_refused_answer(tmp_path):
    from pats.review import Reviewer
    from pats.reviser import RulesReviser
    from pats.scaffold import ScaffoldStore

    one_card = {**ADD_BY_NAMES, "cites": ["C2"]}
    lm = DummyLM([{"edits": [one_card]}, {"edits": [ADD_BY_NAMES]}])
    spec = ScaffoldSpec(mode="pats")
    store = ScaffoldStore(words, 200)
    llm = reviser(lm)
    rules = RulesReviser(removal=True, min_citations=2, mode_of_scaffold="pats", budget=spec.budget)
    reviewer = Reviewer(store, spec, _judge(), llm, rules, words)
    assert reviewer.refines
    outcome = await reviewer._revise_type(5, ASSESSMENT, CARDS, 1e12)
    assert outcome.edits and not outcome.fallback
    assert len(outcome.refused) == 1 and outcome.refused[0].startswith("twc attempt 1: ")
    assert len(lm.history) == 2, "the program asked again; the review did not ask a third time"


def _judge():
    from pats.judges import StatsJudge
    from pats.spec.models import StatsJudgeSpec

    return StatsJudge(StatsJudgeSpec(), ScaffoldSpec(mode="pats").budget)


# -- metric -------------------------------------------------------------------------------------------


def test_the_metric_scores_the_first_answer_and_says_why():
    import dspy

    add = AddEdit(kind="skill", scope="type:twc", text="x", cites=("a", "b"))
    upd = UpdateEdit(entry_id="s1", text="y", cites=("a",))
    delete = DeleteEdit(entry_id="s2", reason="z", cites=("a", "b"))
    assert attempt_score(Attempt(edits=(add,)), [add]) == 1.0
    assert attempt_score(Attempt(), [add]) == 0.0, "nothing, where the rules wrote edits"
    assert attempt_score(Attempt(), []) == 1.0
    assert attempt_score(Attempt(edits=(delete,)), [add]) == 0.5, "accepted, but not the kind called for"
    assert attempt_score(Attempt(edits=(add,)), []) == 0.5, "edits where the rules wrote none"
    assert attempt_score(Attempt(edits=(add, delete)), [add, add]) == 0.75  # one ADD of two shared
    refused = Attempt(edits=(add, upd), problems=("edit 1 (UPDATE s1): cites 1 distinct card(s); ...",))
    assert attempt_score(refused, [add]) == 0.25  # half of one valid edit in two
    set_wide = Attempt(edits=(add,), problems=("edit set (COMPRESS): the type's entries go from 3 to 4",))
    assert attempt_score(set_wide, [add]) == 0.0
    assert kinds_as_reference([add, add, delete], [delete, add]) == 2 / 3

    from pats.types import Refinement

    prediction = dspy.Prediction(refinement=Refinement(attempts=(refused, Attempt(edits=(add,)))))
    scored = edit_metric(dspy.Example(reference=[add]), prediction)
    assert scored.score == 0.25 and "cites 1 distinct card(s)" in scored.feedback, "the first answer counts"
    assert (scored >= 1.0) is False and float(scored) == 0.25, "compares as its score (BootstrapFewShot)"
    other_kind = edit_metric(
        dspy.Example(reference=[add]),
        dspy.Prediction(refinement=Refinement(attempts=(Attempt(edits=(delete,)),))),
    )
    assert other_kind.score == 0.5 and "the rules reviser wrote ADD" in other_kind.feedback


# -- bundles, compiling, saving, loading ------------------------------------------------------------------


def test_bundles_are_never_overwritten_by_another_runs(tmp_path):
    (bundle,) = load(BUNDLES, ["twx-s0-twc"])
    save([bundle], tmp_path)
    save([bundle], tmp_path)  # the same bundle again: nothing changes
    other = bundle.model_copy(update={"step": 7})
    with pytest.raises(FileExistsError, match="named after their run directory"):
        save([other], tmp_path)
    assert ReviserBundle.model_validate_json((tmp_path / f"{bundle.name}.json").read_text()) == bundle


def compile_spec(tmp_path: Path, *extra: str) -> list[str]:
    return [
        "experiments/quickstart.yaml",
        "reviser.kind=llm",
        "reviser.llm.model=hosted_vllm/smollm2-135m-instruct",
        "reviser.llm.api_base=http://127.0.0.1:9/v1",
        *extra,
    ]


def train_bundles(tmp_path: Path) -> Path:
    folder = tmp_path / "bundles"
    bundles = load(BUNDLES, ["twx-s0-twc", "twx-s1-twc", "search_qa-s0"])
    save([b.model_copy(update={"split": "train"}) for b in bundles[:2]] + bundles[2:], folder)
    return folder


def test_compile_reviser_saves_demos_from_train_bundles_and_a_spec_loads_it(tmp_path, capsys):
    from pats.cli.main import main
    from pats.spec import load_spec

    out = tmp_path / "program.json"
    items = compile_spec(tmp_path)
    assert (
        main(["compile-reviser", *items, "--bundles", str(train_bundles(tmp_path)), "--out", str(out)]) == 0
    )
    assert "2 demos from 2 train bundles" in capsys.readouterr().out
    saved = json.loads(out.read_text())
    assert saved["meta"]["trainset"] == ["twx-s0-twc", "twx-s1-twc"], "held-out bundles are never compiled on"
    demos = saved["state"]["revise"]["demos"]
    assert len(demos) == 2 and all(d["cards"].startswith("[C1]") for d in demos)
    assert all(c.startswith("C") for d in demos for e in d["edits"] for c in e["cites"]), "demos cite names"

    spec = load_spec(items[0], [*items[1:], f"reviser.program={out}"])
    assert spec.reviser.kind == "llm"
    program = load_program(spec.reviser, load_reviser_prompt(), _settings(spec))
    assert len(program.revise.demos) == 2

    with pytest.raises(SpecError, match="scaffold.min_citations was 2 when it was compiled, this spec has 1"):
        other = load_spec(items[0], [*items[1:], f"reviser.program={out}", "scaffold.min_citations=1"])
        assert other.reviser.kind == "llm"
        load_program(other.reviser, program.prompt, _settings(other))
    with pytest.raises(SpecError, match="compiled for reviser.llm.model hosted_vllm/smollm2"):
        other = load_spec(
            items[0], [*items[1:4], "reviser.llm.model=hosted_vllm/other", f"reviser.program={out}"]
        )
        assert other.reviser.kind == "llm"
        load_program(other.reviser, program.prompt, _settings(other))


def _settings(spec) -> ReviserSettings:
    from pats.reviser.compile import settings_of

    return settings_of(spec)


def test_compile_reviser_refuses_bundles_without_a_train_split(tmp_path, capsys):
    from pats.cli.main import main

    folder = tmp_path / "heldout"
    save(load(BUNDLES, ["twx-s0-twc"]), folder)
    assert main(["compile-reviser", *compile_spec(tmp_path), "--bundles", str(folder)]) == 2
    assert "no train bundles" in capsys.readouterr().err


def test_a_program_file_that_is_missing_or_not_a_program_is_refused_with_the_command(tmp_path):
    from pats.errors import PrerequisiteError

    prompt = load_reviser_prompt()
    spec = LLMReviserSpec(llm=LLMSpec(model="hosted_vllm/m"), program=str(tmp_path / "none.json"))
    with pytest.raises(PrerequisiteError, match="pats compile-reviser SPEC"):
        load_program(spec, prompt, ReviserSettings())
    (tmp_path / "bad.json").write_text("{}")
    with pytest.raises(SpecError, match="is not a program saved by `pats compile-reviser`"):
        load_program(
            spec.model_copy(update={"program": str(tmp_path / "bad.json")}), prompt, ReviserSettings()
        )
    meta = meta_of("hosted_vllm/m", prompt, ReviserSettings(), "labeled", 0, [])
    assert check_meta(meta, "hosted_vllm/m", prompt, ReviserSettings()) == []
    assert check_meta(meta, "hosted_vllm/m", prompt, ReviserSettings(task_plans=False)) == [
        "scaffold.task_plans was True when it was compiled, this spec has False"
    ]


# -- the probe, with the reviser's own schema -------------------------------------------------------------


def test_a_server_that_refuses_the_reviser_schema_turns_structured_output_off_at_the_probe(capsys):
    import asyncio

    from pats.lm.caller import probe_structured
    from pats.testing import ScriptedOpenAIServer

    wire = f"[[ ## edits ## ]]\n{json.dumps([ADD_BY_NAMES])}\n\n[[ ## completed ## ]]"
    # A server that takes response_format but not `prefixItems` (as a provider's strict mode may not):
    # the old probe's one-field schema would have passed, and every review call would have been refused.
    with ScriptedOpenAIServer([wire], structured=True, refused_keywords=["prefixItems"]) as server:
        spec = LLMReviserSpec(llm=LLMSpec(model="hosted_vllm/m", api_base=server.base_url, structured="auto"))
        llm = LLMReviser(spec, ReviserSettings(min_citations=2), check=check)
        assert asyncio.run(probe_structured(llm.caller, "reviser.llm")) is False
        refinement = asyncio.run(llm.refine(5, ASSESSMENT, CARDS, ENTRIES))
    (probe,) = server.probes
    assert probe["response_format"]["json_schema"]["schema"] == reviser_probe(llm.settings).schema
    assert "response_format" not in server.requests[-1], "the review's call went out in free-form fields"
    assert refinement.accepted and llm.faults == {}
    err = capsys.readouterr().err
    assert "structured output off" in err and "keyword 'prefixItems' is not supported" in err


def test_a_server_that_keeps_the_schema_passes_the_probe():
    import asyncio

    from pats.lm.caller import probe_structured
    from pats.testing import ScriptedOpenAIServer

    with ScriptedOpenAIServer([], structured=True) as server:
        spec = LLMReviserSpec(llm=LLMSpec(model="hosted_vllm/m2", api_base=server.base_url))
        assert asyncio.run(probe_structured(LLMReviser(spec).caller)) is True
    with ScriptedOpenAIServer([], structured=True, probe='{"edits": [{"op": "ADD"}]}') as server:
        spec = LLMReviserSpec(llm=LLMSpec(model="hosted_vllm/m3", api_base=server.base_url))
        assert asyncio.run(probe_structured(LLMReviser(spec).caller)) is False, "JSON the schema refuses"


# -- bootstrap ---------------------------------------------------------------------------------------------


def test_bootstrap_keeps_only_first_answers_the_check_accepts(tmp_path):
    from pats.models import token_counter
    from pats.reviser.compile import compile_program
    from pats.spec import load_spec
    from pats.testing import ScriptedOpenAIServer

    bundles = load(BUNDLES, ["twx-s1-twc", "twx-s2-twc"])
    train = [b.model_copy(update={"split": "train"}) for b in bundles]
    answers = []
    for b in train:
        call_names = [f"C{i + 1}" for i, c in enumerate(c for c in b.cards if c.task_type == b.task_type)]
        answers.append({"op": "ADD", "kind": "skill", "scope": f"type:{b.task_type}",
                        "text": f"Take the item first ({b.name}).", "cites": call_names[:2]})  # fmt: skip
    script = [json.dumps({"edits": [answers[0]]}), json.dumps({"edits": [{**answers[1], "cites": ["C1"]}]})]
    with ScriptedOpenAIServer(script, structured=True) as server:
        spec = load_spec(
            "experiments/quickstart.yaml",
            [
                "reviser.kind=llm",
                "reviser.llm.model=hosted_vllm/boot",
                f"reviser.llm.api_base={server.base_url}",
            ],
        )
        program, meta = compile_program(
            spec, train, token_counter(spec.policy.model), optimizer="bootstrap", k=2
        )
    assert meta.optimizer == "bootstrap" and meta.demos == 1, "the refused second answer is no demo"
    (demo,) = program.revise.demos
    assert demo["task_type"] == "twc" and "Take the item first (twx-s1-twc)" in json.dumps(demo["edits"])


# -- select ------------------------------------------------------------------------------------------------


def test_select_keeps_the_candidate_whose_first_answers_pass_on_the_other_train_bundles(tmp_path):
    """No demo, and each labeled demo alone, scored by the LLM's first answers; a demo is not scored on
    its own bundle (a model that copies its demo would pass there by copying)."""
    from pats.models import token_counter
    from pats.reviser.compile import compile_program, named_demos
    from pats.reviser.llm import revise_call
    from pats.spec import load_spec
    from pats.testing import ScriptedOpenAIServer

    bundles = load(BUNDLES, ["twx-s1-twc", "twx-s2-twc"])
    train = [b.model_copy(update={"split": "train"}) for b in bundles]

    def answer(b, cited: int) -> str:
        names = [f"C{i + 1}" for i, c in enumerate(c for c in b.cards if c.task_type == b.task_type)]
        add = {"op": "ADD", "kind": "skill", "scope": f"type:{b.task_type}",
               "text": f"Take the item first ({b.name}).", "cites": names[:cited]}  # fmt: skip
        return json.dumps({"edits": [add]})

    def valid(b):
        return answer(b, 2)

    def refused(b):
        return answer(b, 1)  # one citation, where the spec asks two distinct

    spec = load_spec(
        "experiments/quickstart.yaml",
        ["reviser.kind=llm", "reviser.llm.model=hosted_vllm/select", "reviser.llm.concurrency=1"],
    )
    first, second = (name for name, _ in named_demos(spec, train, load_reviser_prompt(), words))
    a, b = (next(t for t in train if t.name == n) for n in (first, second))
    # One call per train bundle per candidate, in order (concurrency 1): no demo, then each demo by rank.
    script = [refused(a), refused(b)]  # no demo: 0.0
    script += [valid(a), refused(b)]  # demo of a: passes only on its own bundle, which is not scored
    script += [valid(a), refused(b)]  # demo of b: passes on a, the bundle it is scored on
    with ScriptedOpenAIServer(script, structured=True) as server:
        spec = load_spec(
            "experiments/quickstart.yaml",
            [
                "reviser.kind=llm",
                "reviser.llm.model=hosted_vllm/select",
                f"reviser.llm.api_base={server.base_url}",
                "reviser.llm.concurrency=1",
            ],
        )
        program, meta = compile_program(spec, train, token_counter(spec.policy.model), optimizer="select")
    assert len(server.requests) == 6
    assert meta.optimizer == "select" and meta.demos == 1
    assert [(c.demo, c.score, c.scored) for c in meta.selection] == [
        (b.name, 1.0, 1),
        ("", 0.0, 2),
        (a.name, 0.0, 1),
    ]
    (demo,) = program.revise.demos
    call = revise_call(load_reviser_prompt(), b.assessment, b.cards, b.entries, _settings(spec))
    assert (demo["review"], demo["cards"]) == (call.inputs["review"], call.inputs["cards"]), "b's review"
    assert f"({b.name})" not in json.dumps(demo["edits"]), "the demo is the rules reviser's answer"


# -- match -------------------------------------------------------------------------------------------------


def test_match_shows_each_review_the_demo_of_its_task_type_and_mode(tmp_path):
    """Every labeled demo is kept; a review is shown only the one of its task type and mode (else of
    its mode, else none), and a saved match program loads as one."""
    from pats.cli import compile_reviser
    from pats.models import token_counter
    from pats.reviser.compile import OPTIMIZERS, compile_program, named_demos
    from pats.reviser.llm import revise_call
    from pats.reviser.program import save_program
    from pats.spec import load_spec
    from pats.testing import ScriptedOpenAIServer

    assert compile_reviser.OPTIMIZERS == OPTIMIZERS, "the CLI offers what compile_program takes"
    bundles = load(BUNDLES, ["twx-s1-twc", "twx-twc-compress-s21-s2-twc", "search_qa-s0-popqa"])
    train = [b.model_copy(update={"split": "train"}) for b in bundles[:2]]
    spec = load_spec(
        "experiments/quickstart.yaml", ["reviser.kind=llm", "reviser.llm.model=hosted_vllm/match"]
    )
    program, meta = compile_program(spec, train, token_counter(spec.policy.model), optimizer="match")
    assert meta.optimizer == "match" and meta.demos == len(
        named_demos(spec, train, load_reviser_prompt(), words)
    )
    assert program.match_demos and meta.demos == 2, "both reviews' rules answers were accepted: both kept"
    settings = _settings(spec)
    inputs = {
        b.name: revise_call(load_reviser_prompt(), b.assessment, b.cards, b.entries, settings).inputs
        for b in bundles
    }
    for b in train:  # EXPAND twc and COMPRESS twc: each its own
        (demo,) = program.demo_for(inputs[b.name])
        assert (demo["mode"], demo["review"]) == (b.assessment.mode.value, inputs[b.name]["review"])
    (demo,) = program.demo_for({**inputs["search_qa-s0-popqa"]})  # popqa EXPAND: twc's EXPAND, by mode
    assert demo["mode"] == "EXPAND" and demo["task_type"] == "twc"
    assert program.demo_for({**inputs["twx-s1-twc"], "mode": "PRUNE"}) == [], "no demo of that mode"

    path = save_program(program, meta, tmp_path / "match.json")
    loaded = load_spec(
        "experiments/quickstart.yaml",
        ["reviser.kind=llm", "reviser.llm.model=hosted_vllm/match", f"reviser.program={path}"],
    )
    again = load_program(loaded.reviser, load_reviser_prompt(), settings)
    assert again.match_demos and len(again.revise.demos) == 2

    # What the LLM is sent: the one matching demo's review, not the other's.
    held = bundles[2]
    call = revise_call(load_reviser_prompt(), held.assessment, held.cards, held.entries, settings)
    with ScriptedOpenAIServer([json.dumps({"edits": []})], structured=True) as server:
        import dspy

        lm = dspy.LM("hosted_vllm/match", api_base=server.base_url, api_key="x", cache=False)
        with dspy.context(lm=lm, adapter=dspy.JSONAdapter()):
            again(aliases=call.aliases, **call.inputs)
    (sent,) = server.prompts()
    expand, compress = (inputs[b.name]["review"] for b in train)
    assert expand in sent and compress not in sent


# -- what mutation testing of pats/reviser/program.py asked for -----------------------------------------


def test_demo_for_prefers_the_reviews_task_type_then_its_mode_and_shows_one():
    program = new_program(load_reviser_prompt())
    assert program.match_demos is False, "only a match program picks demos; others show all of theirs"
    twc, pick, pick2 = (
        {"task_type": "twc", "mode": "REVISE", "n": 0},
        {"task_type": "pick", "mode": "REVISE", "n": 1},
        {"task_type": "pick", "mode": "REVISE", "n": 2},
    )
    program.revise.demos = [twc, pick, pick2]
    assert program.demo_for({"task_type": "pick", "mode": "REVISE"}) == [pick], "its type first, one"
    assert program.demo_for({"task_type": "popqa", "mode": "REVISE"}) == [twc], "else its mode"
    assert program.demo_for({"task_type": "pick", "mode": "PRUNE"}) == [], "else none"


async def test_an_unreadable_first_answer_raises_and_a_later_one_ends_the_run_refused():
    from pats.errors import JudgeError

    one_card = {**ADD_BY_NAMES, "cites": ["C2"]}
    bogus = {"edits": [{"op": "BOGUS"}]}
    lm = DummyLM([{"edits": [one_card]}, bogus, {"edits": [ADD_BY_NAMES]}])
    refinement = await reviser(lm, attempts=3).refine(5, ASSESSMENT, CARDS, ENTRIES)
    assert len(refinement.attempts) == 2 and not refinement.accepted, "no third answer is asked"
    (problem,) = refinement.attempts[1].problems
    assert problem.startswith("the answer was not an edit list: malformed edit list: ")
    with pytest.raises(JudgeError):
        await reviser(DummyLM([bogus] * 4), attempts=3).refine(5, ASSESSMENT, CARDS, ENTRIES)


def test_the_program_asks_once_unless_told_otherwise():
    import dspy

    from pats.reviser.llm import revise_call

    one_card = {**ADD_BY_NAMES, "cites": ["C2"]}
    lm = DummyLM([{"edits": [one_card]}] * 2)
    call = revise_call(load_reviser_prompt(), ASSESSMENT, CARDS, ENTRIES, ReviserSettings())
    with dspy.context(lm=lm):
        prediction = new_program(load_reviser_prompt())(
            aliases=call.aliases, check=lambda edits: ["refused"], **call.inputs
        )
    assert len(prediction.refinement.attempts) == 1 and len(lm.history) == 1


def test_the_metric_says_why_in_each_case():
    import dspy

    from pats.types import Refinement

    add = AddEdit(kind="skill", scope="type:twc", text="x", cites=("a", "b"))
    delete = DeleteEdit(entry_id="s2", reason="z", cites=("a", "b"))

    def said(attempt: Attempt, reference) -> tuple[float, str]:
        out = edit_metric(
            dspy.Example(reference=reference), dspy.Prediction(refinement=Refinement(attempts=(attempt,)))
        )
        return out.score, out.feedback

    assert said(Attempt(edits=(add,), problems=("p1", "p2")), [add]) == (
        0.0,
        "The edit set was refused:\n- p1\n- p2",
    )
    assert said(Attempt(), [add]) == (
        0.0,
        "No edits, where the evidence supported some (the rules reviser wrote some).",
    )
    assert said(Attempt(edits=(add, delete)), []) == (
        0.5,
        "The edit set was accepted, but its edits (ADD, DELETE) are not the kinds the evidence called for here "
        "(the rules reviser wrote none).",
    )
    assert said(Attempt(edits=(add,)), [add]) == (1.0, "The edit set was accepted.")
    assert said(Attempt(), []) == (1.0, "The edit set was accepted.")
    assert kinds_as_reference([], []) == 1.0 and kinds_as_reference([], [add]) == 0.0
    assert attempt_score(Attempt(problems=("the answer was not an edit list: x",)), [add]) == 0.0


def test_a_programs_file_says_its_format_and_fits_the_spec_it_was_compiled_for(tmp_path):
    from pats.reviser.program import FORMAT, ProgramMeta, save_program
    from pats.spec import load_spec

    assert FORMAT == "pats-reviser-program/1"
    prompt = load_reviser_prompt()
    meta = meta_of("hosted_vllm/m", prompt, ReviserSettings(), "labeled", 0, [])
    path = save_program(new_program(prompt), meta, tmp_path / "a" / "b" / "p.json")  # folders made
    assert json.loads(path.read_text())["meta"]["format"] == "pats-reviser-program/1"
    old = {k: v for k, v in meta.model_dump(mode="json").items() if k != "selection"}
    assert ProgramMeta.model_validate(old).selection == (), "a program saved before `select` loads"
    # The committed programs fit the spec they were compiled for: a change to the prompt, the digest
    # or the signature that would refuse them fails here, not in the vLLM test only.
    spec = load_spec("experiments/ablations/llm_reviser_embedded.yaml")
    assert spec.reviser.kind == "llm"
    from pats.reviser.compile import settings_of

    for saved in sorted(Path("bench/results/reviser/programs").glob("*.json")):
        meta = ProgramMeta.model_validate(json.loads(saved.read_text())["meta"])
        assert check_meta(meta, spec.reviser.llm.model, prompt, settings_of(spec)) == [], saved.name


def test_check_meta_names_each_difference_whole():
    prompt = load_reviser_prompt()
    meta = meta_of("hosted_vllm/m", prompt, ReviserSettings(), "labeled", 0, [])
    other = ReviserSettings(min_citations=1, removal=False, add_only=True, task_plans=False)
    changed = meta.model_copy(update={"prompt_sha": "0" * 16, "fields": ("x", "edits")})
    assert check_meta(changed, "hosted_vllm/n", prompt, other) == [
        "it was compiled for reviser.llm.model hosted_vllm/m, this spec asks hosted_vllm/n",
        "scaffold.min_citations was 2 when it was compiled, this spec has 1",
        "the scaffold's removal (scaffold.mode pats with removal on) was True when it was compiled, this spec has False",
        "scaffold.mode grow (add only) was False when it was compiled, this spec has True",
        "scaffold.task_plans was True when it was compiled, this spec has False",
        "the reviser prompt (judges/reviser.yaml) changed since it was compiled",
        f"its signature has fields ['x', 'edits'], this pats's {[*INPUT_FIELDS, 'edits']}",
    ]


def test_load_programs_errors_say_what_to_do_whole(tmp_path):
    from pats.errors import PrerequisiteError
    from pats.reviser.program import save_program

    prompt = load_reviser_prompt()
    missing = tmp_path / "none.json"
    spec = LLMReviserSpec(llm=LLMSpec(model="hosted_vllm/m"), program=str(missing))
    with pytest.raises(PrerequisiteError) as err:
        load_program(spec, prompt, ReviserSettings())
    assert str(err.value) == (
        f"reviser.program: {missing} not found; compile one with `pats compile-reviser SPEC --bundles DIR "
        "--out PATH`, or leave reviser.program out to run the uncompiled program"
    )
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SpecError) as err:
        load_program(spec.model_copy(update={"program": str(bad)}), prompt, ReviserSettings())
    assert [i.message for i in err.value.issues] == [
        f"reviser.program: {bad} is not a program saved by `pats compile-reviser` (pats-reviser-program/1): "
        "'meta'; compile it again"
    ]
    path = save_program(
        new_program(prompt),
        meta_of("hosted_vllm/m", prompt, ReviserSettings(), "labeled", 0, []),
        tmp_path / "p.json",
    )
    other = spec.model_copy(update={"program": str(path), "llm": LLMSpec(model="hosted_vllm/n")})
    with pytest.raises(SpecError) as err:
        load_program(other, prompt, ReviserSettings(min_citations=1))
    assert [i.message for i in err.value.issues] == [
        f"reviser.program: {path} does not fit this spec: it was compiled for reviser.llm.model hosted_vllm/m, "
        "this spec asks hosted_vllm/n; scaffold.min_citations was 2 when it was compiled, this spec has 1. "
        "Compile it for this spec (`pats compile-reviser SPEC --bundles DIR --out PATH`), or leave "
        "reviser.program out"
    ]
