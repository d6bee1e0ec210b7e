"""The reviser benchmark: the shipped bundles load into the reviser's records; one bundle scored against a
scripted OpenAI-compatible server counts parsed answers, valid edits and citations as the review's
validator sees them (pats.reviser.score, pats.reviser.bench); the benchmark's own checks (oracle row,
perturbations: bench/studies/reviser_checks.py); and the committed results and docs table agree. The
command's own tests are in tests/test_reviser_command.py. No model is loaded: tokens are counted by
words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pats.lm.caller import usd_cost
from pats.reviser.bench import Contender, only_faults, reviser_for, summarize
from pats.reviser.bundles import SHIPPED, ReviserBundle, load
from pats.reviser.score import BundleScore, score
from pats.scaffold.problems import named_edits, rule_of
from pats.spec.models import LLMSpec
from pats.testing import ScriptedOpenAIServer
from pats.types import EvidenceCard, ScaffoldEntry

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # bench.studies.*, as `python bench/studies/x.py` imports them

KEY_ENV = "PATS_TEST_BENCH_KEY"
RULES = Contender(label="rules")


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-bench")


@pytest.fixture(scope="module")
def bundles() -> list[ReviserBundle]:
    return load(SHIPPED)


def test_the_shipped_bundles_load_into_the_revisers_records(bundles):
    assert (len(load(SHIPPED, split="heldout")), len(load(SHIPPED, split="train"))) == (19, 15), (
        "docs/llm.md describes 19 held-out and 15 train bundles"
    )
    assert {b.environment for b in bundles} == {"alfworld", "search_qa", "twx"}
    for b in bundles:
        assert all(isinstance(c, EvidenceCard) for c in b.cards)
        assert all(isinstance(e, ScaffoldEntry) for e in b.entries)
        assert any(c.task_type == b.task_type for c in b.cards), f"{b.name}: no card of its own type"
        again = ReviserBundle.model_validate_json(json.dumps(b.model_dump(mode="json")))
        assert again == b, "a bundle reads back as the record it was written from"


def test_the_rules_reviser_passes_its_own_validator_on_every_bundle(bundles):
    rows = [score(b, reviser_for(RULES, b, words), words) for b in bundles]
    assert all(r.parsed and r.set_valid and r.citations_valid for r in rows), [r.problems for r in rows]
    s = summarize(rows)
    assert s.calls == 0 and (s.usd, s.usd_note) == (0.0, "no LLM calls"), "the rules cost nothing"
    assert (s.kinds_as_rules, s.kinds_as_rules_sets) == (1.0, len(rows)), "the rules agree with themselves"


def test_rule_names_and_edit_indices_from_the_validators_messages():
    assert rule_of("edit 0 (ADD skill type:x): cites unknown card 'c9'; cite ids of ...") == "unknown_card"
    assert rule_of("edit 1 (UPDATE e1): cites 1 distinct card(s); cite at least 2 ...") == "too_few_citations"
    assert rule_of("edits 0, 2: 3 skill/plan ADDs; REVISE accepts at most 1 ...") == "mode_add_budget"
    assert named_edits("edits 0, 2: 3 skill/plan ADDs") == {0, 2}
    assert named_edits("edit set (COMPRESS): the type's entries go from 9 to 12 tokens") == set()


def row(**fields) -> BundleScore:
    """A crafted row: only the counted fields given, the rest the defaults."""
    return BundleScore(bundle="b", environment="alfworld", task_type="pick", mode="REVISE", **fields)


def test_the_summary_counts_each_field_of_crafted_rows():
    """Each total of `summarize` on rows whose numbers are known (from the mutation run of bench.py,
    issue 59: the committed results' summaries agree in most fields, so a total taken wrongly in one
    went unseen): citations counted only where the answer parsed, the refusing rules once each in
    order, the kinds' mean over the accepted sets, and the time per call."""
    accepted = row(parsed=True, set_valid=True, valid_after_retry=True, proposed=2, valid_edits=2,
                   citations_valid=True, kinds_as_rules=0.5, tokens_before=10, tokens_after=14, calls=1,
                   llm_tokens=30, prompt_tokens=20, completion_tokens=10, seconds=2.0, answers=1)  # fmt: skip
    refused = row(parsed=True, valid_after_retry=True, proposed=3, valid_edits=1, citations_valid=False,
                  rules=("unknown_card", "near_duplicate", "unknown_card"), tokens_before=5, tokens_after=6,
                  calls=2, llm_tokens=70, prompt_tokens=50, completion_tokens=20, seconds=4.0, answers=2)  # fmt: skip
    fault = row(parsed=False, error="timed out", fault="timeout", calls=1, seconds=3.0)
    same = row(parsed=True, set_valid=True, valid_after_retry=True, citations_valid=True, kinds_as_rules=1.0,
               tokens_before=1, tokens_after=1)  # fmt: skip
    assert summarize([accepted, refused, fault, same]).model_dump() == {
        "bundles": 4,
        "parsed": 3,
        "sets_valid": 2,
        "sets_valid_after_retry": 3,
        "edits_proposed": 5,
        "edits_valid": 3,
        "citations_valid": 2,
        "tokens_before": 16,
        "tokens_after": 21,
        "calls": 4,
        "tokens_per_call": 25.0,
        "seconds_per_call": 2.25,
        "refusing_rules": ("near_duplicate", "unknown_card"),
        "kinds_as_rules": 0.75,
        "kinds_as_rules_sets": 2,
        "prompt_tokens": 70,
        "completion_tokens": 30,
        "usd": None,
        "usd_note": "no model named to price",
    }
    priced = summarize([accepted, refused], "openai/gpt-4o-mini")
    assert (priced.usd, priced.usd_note) == (usd_cost("openai/gpt-4o-mini", 70, 30), "")
    unsplit = summarize([accepted, row(parsed=True, calls=1, llm_tokens=5)], "openai/gpt-4o-mini")
    assert (unsplit.usd, unsplit.usd_note) == (None, "rows without prompt and completion tokens apart")
    # no call: the time per bundle, and nothing to pay
    rules = summarize([row(parsed=True, seconds=1.0), row(parsed=True, seconds=2.0)])
    assert (rules.calls, rules.tokens_per_call, rules.seconds_per_call) == (0, 0.0, 1.5)
    assert (rules.usd, rules.usd_note, rules.kinds_as_rules, rules.kinds_as_rules_sets) == (
        0.0, "no LLM calls", None, 0
    )  # fmt: skip
    assert (summarize([row(parsed=True, seconds=3.0)]).seconds_per_call, summarize([]).seconds_per_call) == (
        3.0,
        0.0,
    )  # one bundle's time is its own; no bundle, no time


def test_only_faults_is_every_row_a_fault_and_at_least_one_row():
    fault, scored = row(parsed=False, fault="timeout"), row(parsed=True)
    assert (only_faults([fault, fault]), only_faults([fault, scored]), only_faults([])) == (
        True,
        False,
        False,
    )


def test_a_result_says_how_it_was_measured_and_whether_every_bundle_was_scored(tmp_path):
    """meta's fields for the rules and for an LLM with a program, and a result of 1 of 2 bundles
    (not complete) and of 1 of 1 (complete), each with its label, summary and rows."""
    import datetime
    import os
    import platform

    from pats.reviser.bench import in_checkout, meta, result

    machine = f"{platform.machine()}, {os.cpu_count()} cpus"
    head = meta(RULES, "pats/reviser/shipped_bundles")
    assert head == {
        "date": datetime.date.today().isoformat(),
        "machine": machine,
        "first_attempt_only": True,
        "bundles_folder": "pats/reviser/shipped_bundles",
        "reviser": "rules",
    }
    llm = LLMSpec(model="hosted_vllm/m", api_base="http://x/v1")
    compiled = Contender(label="m", llm=llm, program="p.json")
    assert (RULES.kind, RULES.model, compiled.kind, compiled.model) == ("rules", None, "llm", "hosted_vllm/m")
    assert meta(compiled, "f", "auto") == {
        **head,
        "bundles_folder": "f",
        "reviser": "llm",
        "llm": llm.model_dump(mode="json"),
        "program": "p.json",
        "structured_asked": "auto",
    }
    rows = [row(parsed=True, calls=1, llm_tokens=3, prompt_tokens=2, completion_tokens=1)]
    part = result(head, "m", rows, 2, "hosted_vllm/m")
    assert part == {
        **head,
        "label": "m",
        "complete": False,
        "summary": summarize(rows, "hosted_vllm/m").model_dump(mode="json"),
        "rows": [rows[0].model_dump(mode="json")],
    }
    assert result(head, "m", rows, 1, None)["complete"] is True
    # a path inside the checkout is written relative to it, one outside whole
    inside = tmp_path / "repo" / "bundles"
    assert in_checkout(tmp_path / "repo" / "x" / ".." / "bundles", tmp_path / "repo") == "bundles"
    assert in_checkout(inside, tmp_path / "elsewhere") == str(inside)


def scripted(server: ScriptedOpenAIServer) -> Contender:
    llm = LLMSpec(model="openai/scripted", api_base=server.base_url, api_key_env=KEY_ENV, timeout_s=10.0,
                  max_retries=0, structured="on")  # fmt: skip
    return Contender(label="scripted", llm=llm)


def test_one_bundle_scored_against_a_scripted_server(bundles):
    bundle = next(b for b in bundles if b.entries and b.assessment.mode.value == "REVISE")
    own = [c.id for c in bundle.cards if c.task_type == bundle.task_type]
    add = {"op": "ADD", "kind": "skill", "scope": f"type:{bundle.task_type}", "text": "Open containers first.",
           "cites": own[:2]}  # fmt: skip
    bad_cite = {
        **add,
        "kind": "mistake",
        "text": "Taking before looking inside wastes turns.",
        "cites": [own[0], "c99-no-such-card"],
    }
    script = [
        json.dumps({"edits": [add]}),  # valid
        "I think the scaffold is fine.",  # malformed: not the JSON the schema asks for
        json.dumps({"edits": [add, bad_cite]}),  # the second cites a card that does not exist
        json.dumps({"edits": [add]}),  # the retry with the problems: accepted
    ]
    with ScriptedOpenAIServer(script, structured=True) as server:
        contender = scripted(server)
        good, malformed, invalid = (
            score(bundle, reviser_for(contender, bundle, words), words) for _ in range(3)
        )

    before = sum(words(e.text) for e in bundle.entries)
    assert good.parsed and good.set_valid and good.citations_valid and good.valid_after_retry
    assert (good.proposed, good.valid_edits, good.calls, good.answers) == (1, 1, 1, 1)
    assert good.tokens_before == before and good.tokens_after == before + words(add["text"])
    assert good.llm_tokens > 0 and good.seconds > 0
    assert good.prompt_tokens > 0 and good.completion_tokens > 0
    assert good.llm_tokens == good.prompt_tokens + good.completion_tokens

    assert good.rules_ops, "the rules reviser writes edits on a REVISE bundle with entries"
    shared = min(1, good.rules_ops.count("ADD"))  # one ADD answered, against the rules' kinds
    assert good.kinds_as_rules == shared / max(1, len(good.rules_ops))
    assert invalid.kinds_as_rules is None, "a refused set has no agreement to count"
    assert not malformed.parsed and malformed.error and malformed.calls == 1
    assert malformed.citations_valid is None and malformed.tokens_after == before

    assert invalid.parsed and not invalid.set_valid and invalid.citations_valid is False
    assert (invalid.proposed, invalid.valid_edits, invalid.answers, invalid.calls) == (2, 1, 2, 2)
    assert invalid.valid_after_retry, "the retry wrote an accepted set"
    assert "unknown_card" in invalid.rules
    assert invalid.tokens_after == before + words(add["text"]), "only the valid edit counts"

    rows = [good, malformed, invalid]
    s = summarize(rows)
    assert (s.parsed, s.sets_valid, s.sets_valid_after_retry, s.edits_proposed, s.edits_valid) == (
        2,
        1,
        2,
        3,
        2,
    )
    assert s.citations_valid == 1 and "unknown_card" in s.refusing_rules

    # USD where LiteLLM's offline cost map knows the model, None with the reason where it does not
    prompt, completion = sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows)
    assert (s.prompt_tokens, s.completion_tokens) == (prompt, completion)
    priced = summarize(rows, "openai/gpt-4o-mini")
    assert priced.usd == usd_cost("openai/gpt-4o-mini", prompt, completion) > 0 and not priced.usd_note
    unknown = summarize(rows, "hosted_vllm/smollm2-135m-instruct")
    assert unknown.usd is None and "does not know hosted_vllm/smollm2-135m-instruct" in unknown.usd_note
    assert s.usd is None, "calls without a model named are not priced"


def test_results_written_before_the_token_split_still_read_and_are_not_priced():
    old = json.loads((REPO / "bench/results/reviser/vllm-embedded-uncompiled-structured_on.json").read_text())
    rows = [BundleScore.model_validate(r) for r in old["rows"]]
    assert any(r.llm_tokens for r in rows) and not any(r.prompt_tokens or r.completion_tokens for r in rows)
    s = summarize(rows, "openai/gpt-4o-mini")
    assert s.usd is None and "apart" in s.usd_note, "a total cannot be priced as prompt or completion"


def test_the_oracle_answer_passes_schema_parser_and_validator_on_every_bundle(bundles):
    from bench.studies.reviser_checks import oracle_row

    rows = [oracle_row(b, words) for b in bundles]
    assert all(r["passes"] for r in rows), [
        (r["bundle"], r["schema_accepts"], r["problems"]) for r in rows if not r["passes"]
    ]
    assert sum(r["edits"] for r in rows) > 0, "the oracle answers with edits, not only empty sets"


def test_every_validator_rule_refuses_the_answer_that_breaks_it(bundles):
    from bench.studies.reviser_checks import PERTURBATIONS, STORE_ONLY, perturbation_rows
    from pats.scaffold.problems import RULES

    base = next(b for b in bundles if b.entries)
    rows = perturbation_rows(base, words)
    assert {r["rule"] for r in rows} == {name for name, _ in RULES} == set(PERTURBATIONS) | set(STORE_ONLY)
    assert all(r["refused"] and r["by_its_rule"] for r in rows), [r for r in rows if not r["by_its_rule"]]
    schema = {r["rule"]: r["schema_refuses"] for r in rows}
    assert schema["unknown_card"] and schema["too_few_citations"], "the schema says these two already"
    assert schema["near_duplicate"] is False, "no schema says near-duplicates: the validator does"


def test_the_docs_table_matches_the_committed_results():
    """Each row of docs/llm.md's reviser table that names a result file says what that file holds."""
    import re

    results = REPO / "bench" / "results" / "reviser"
    doc = (REPO / "docs" / "llm.md").read_text()
    rows = [
        line for line in doc.splitlines() if line.startswith("| ") and re.search(r"\| `[\w.-]+` \|", line)
    ]
    assert len(rows) >= 4, "the table names its result files"
    for row in rows:
        cells = [c.strip().strip("*") for c in row.strip("|").split("|")]  # bold is emphasis, not data
        name = cells[1].strip("`")
        s = json.loads((results / f"{name}.json").read_text())["summary"]
        n = s["bundles"]
        want = [
            f"{n}",
            f"{s['parsed']}/{n}",
            f"{s['sets_valid']}/{n}",
            f"{s['sets_valid_after_retry']}/{n}",
            f"{s['edits_valid']}/{s['edits_proposed']}",
        ]
        assert cells[2:7] == want, f"{name}: the table says {cells[2:7]}, the result {want}"
        if len(cells) > 9:  # the kinds column, where the table has it
            kinds = f"{s['kinds_as_rules']:.2f} ({s['kinds_as_rules_sets']})"
            assert cells[9] == kinds, f"{name}: the table says {cells[9]}, the result {kinds}"


@pytest.mark.parametrize(
    "name",
    ["vllm-embedded-select-structured_on-compiled", "vllm-embedded-uncompiled-heldout19-structured_on"],
)
def test_a_recount_gives_the_committed_rows_and_summary_back(name, tmp_path, monkeypatch):
    """`--recount` on a committed result's answers (the kinds column stripped) gives the committed
    column back through the package's score (pats.reviser.score), and leaves every measured field as
    it was: the package scores a stored answer as bench/reviser.py did when it wrote the file."""
    from bench.studies import reviser

    committed = json.loads((reviser.OUT / f"{name}.json").read_text())
    stripped = {
        **committed,
        "rows": [
            {k: v for k, v in r.items() if k not in ("rules_ops", "kinds_as_rules")}
            for r in committed["rows"]
        ],
    }
    (tmp_path / f"{name}.json").write_text(json.dumps(stripped))
    monkeypatch.setattr(reviser, "OUT", tmp_path)
    again = json.loads(reviser.recount(name, load(SHIPPED)).read_text())
    assert again["rows"] == committed["rows"]
    assert again["summary"] == committed["summary"]
    assert 0 < again["summary"]["kinds_as_rules"] < 1, "the compiled DELETEs are not all the rules' kinds"


HELD_OUT_LLM = sorted(
    p.stem
    for p in (REPO / "bench/results/reviser").glob("vllm-embedded-*.json")
    if json.loads(p.read_text())["summary"]["bundles"] == 19
)


@pytest.mark.parametrize("name", HELD_OUT_LLM)
def test_the_package_scores_each_committed_first_answer_as_its_result_says(name, count_tokens):
    """Every stored first answer of the committed 19-bundle LLM results, checked again on its shipped
    bundle by pats.reviser.score with the policy's tokenizer, gives the row's validator fields back
    (proposed, valid, set accepted, rules, problems, citations, ops, scaffold tokens): the package's
    score is the one bench/reviser.py wrote them with."""
    from pats.reviser.score import edit_set_fields

    committed = json.loads((REPO / "bench/results/reviser" / f"{name}.json").read_text())
    by_name = {b.name: b for b in load(SHIPPED)}
    rows = [BundleScore.model_validate(r) for r in committed["rows"]]
    assert len(rows) == 19 and sum(r.parsed for r in rows) >= 18
    for row in rows:
        if not row.parsed:
            continue
        fields = edit_set_fields(by_name[row.bundle], row.edits, count_tokens)
        assert {k: getattr(row, k) for k in fields} == fields, row.bundle


def test_run_scores_each_bundle_in_turn_and_hands_on_the_rows_so_far(bundles):
    """`run` (bench/studies/reviser.py's loop): one contender's rows in the bundles' order, and after
    each bundle the rows so far, so that a run stopped part way can write what it scored."""
    from pats.reviser.bench import run

    two = bundles[:2]
    seen: list[list[str]] = []
    rows = run(RULES, two, lambda so_far: seen.append([r.bundle for r in so_far]))
    assert [r.bundle for r in rows] == [b.name for b in two]
    assert seen == [[two[0].name], [two[0].name, two[1].name]]


def test_a_reviser_error_without_a_call_is_kept_whole_as_an_other_fault(bundles):
    """A JudgeError that no LLM call's fault explains (here the rules reviser's): the row keeps the error
    whole, every line of it (issue 59, item 12: it kept the first line's 400 characters), its fault is
    'other', and the written row has the field only when it is set."""
    from pats.errors import JudgeError

    bundle = bundles[0]
    reviser = reviser_for(RULES, bundle, words)
    said = "no edit list in the answer\n" + "x" * 500

    async def refuse(*args):
        raise JudgeError(said)

    reviser.revise = refuse  # type: ignore[method-assign]
    row = score(bundle, reviser, words)
    before = sum(words(e.text) for e in bundle.entries)
    assert (row.parsed, row.error, row.fault, row.tokens_before, row.tokens_after) == (
        False, said, "other", before, before,
    )  # fmt: skip
    assert row.model_dump()["fault"] == "other" and row.model_dump(mode="json")["error"] == said
    scored = score(bundle, reviser_for(RULES, bundle, words), words)
    assert (
        scored.parsed and "fault" not in scored.model_dump() and "fault" not in scored.model_dump(mode="json")
    )
    assert scored.answers == 1 and 0 <= scored.seconds < 60, "the rules answer once; the time is the call's"


def test_a_reviser_scored_twice_counts_each_bundles_own_calls(bundles):
    """score counts the calls and tokens of its own bundle: what the same reviser used before is not
    added in."""
    bundle = next(b for b in bundles if b.entries and b.assessment.mode.value == "REVISE")
    with ScriptedOpenAIServer(["not an edit list"] * 2, structured=True) as server:
        reviser = reviser_for(scripted(server), bundle, words)
        first, second = (score(bundle, reviser, words) for _ in range(2))
    assert (first.calls, second.calls) == (1, 1)
    assert first.prompt_tokens > 0 and second.prompt_tokens == first.prompt_tokens
    assert second.llm_tokens == first.llm_tokens and 0 < second.seconds < 60
