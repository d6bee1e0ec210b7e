"""The reviser benchmark (bench/reviser.py): its committed bundles load into the reviser's records,
and one bundle scored against a scripted OpenAI-compatible server counts parsed answers, valid edits
and citations as the review's validator sees them. No model is loaded: tokens are counted by words."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))

from reviser import llm_reviser, rules_reviser, summary  # noqa: E402
from reviser_bundles import BUNDLES, ReviserBundle, load  # noqa: E402
from reviser_score import BundleScore, score  # noqa: E402

from pats.lm.caller import usd_cost  # noqa: E402
from pats.scaffold.problems import named_edits, rule_of  # noqa: E402
from pats.testing import ScriptedOpenAIServer  # noqa: E402
from pats.types import EvidenceCard, ScaffoldEntry  # noqa: E402

KEY_ENV = "PATS_TEST_BENCH_KEY"


def words(text: str) -> int:
    return len(text.split())


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-bench")


@pytest.fixture(scope="module")
def bundles() -> list[ReviserBundle]:
    return load(BUNDLES)


def test_bundles_load_into_the_revisers_records(bundles):
    assert len(bundles) >= 3
    assert {b.environment for b in bundles} >= {"alfworld"}
    for b in bundles:
        assert all(isinstance(c, EvidenceCard) for c in b.cards)
        assert all(isinstance(e, ScaffoldEntry) for e in b.entries)
        assert any(c.task_type == b.task_type for c in b.cards), f"{b.name}: no card of its own type"
        again = ReviserBundle.model_validate_json(json.dumps(b.model_dump(mode="json")))
        assert again == b, "a bundle reads back as the record it was written from"


def test_the_rules_reviser_passes_its_own_validator_on_every_bundle(bundles):
    rows = [score(b, rules_reviser(b), words) for b in bundles]
    assert all(r.parsed and r.set_valid and r.citations_valid for r in rows), [r.problems for r in rows]
    s = summary(rows)
    assert s["calls"] == 0 and (s["usd"], s["usd_note"]) == (0.0, "no LLM calls"), "the rules cost nothing"
    assert (s["kinds_as_rules"], s["kinds_as_rules_sets"]) == (1.0, len(rows)), (
        "the rules agree with themselves"
    )


def test_rule_names_and_edit_indices_from_the_validators_messages():
    assert rule_of("edit 0 (ADD skill type:x): cites unknown card 'c9'; cite ids of ...") == "unknown_card"
    assert rule_of("edit 1 (UPDATE e1): cites 1 distinct card(s); cite at least 2 ...") == "too_few_citations"
    assert rule_of("edits 0, 2: 3 skill/plan ADDs; REVISE accepts at most 1 ...") == "mode_add_budget"
    assert named_edits("edits 0, 2: 3 skill/plan ADDs") == {0, 2}
    assert named_edits("edit set (COMPRESS): the type's entries go from 9 to 12 tokens") == set()


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
    ]
    with ScriptedOpenAIServer(script, structured=True) as server:
        llm = {"model": "openai/scripted", "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 10.0,
               "max_retries": 0, "structured": "on"}  # fmt: skip
        good, malformed, invalid = (score(bundle, llm_reviser(bundle, llm), words) for _ in range(3))

    before = sum(words(e.text) for e in bundle.entries)
    assert good.parsed and good.set_valid and good.citations_valid
    assert (good.proposed, good.valid_edits, good.calls) == (1, 1, 1)
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
    assert (invalid.proposed, invalid.valid_edits) == (2, 1)
    assert "unknown_card" in invalid.rules
    assert invalid.tokens_after == before + words(add["text"]), "only the valid edit counts"

    s = summary([good, malformed, invalid])
    assert (s["parsed"], s["sets_valid"], s["edits_proposed"], s["edits_valid"], s["citations_valid"]) == (
        2,
        1,
        3,
        2,
        1,
    )

    # USD where LiteLLM's offline cost map knows the model, None with the reason where it does not
    rows = [good, malformed, invalid]
    prompt, completion = sum(r.prompt_tokens for r in rows), sum(r.completion_tokens for r in rows)
    assert (s["prompt_tokens"], s["completion_tokens"]) == (prompt, completion)
    priced = summary(rows, "openai/gpt-4o-mini")
    assert priced["usd"] == usd_cost("openai/gpt-4o-mini", prompt, completion) > 0 and not priced["usd_note"]
    unknown = summary(rows, "hosted_vllm/smollm2-135m-instruct")
    assert unknown["usd"] is None and "does not know hosted_vllm/smollm2-135m-instruct" in unknown["usd_note"]
    assert summary(rows)["usd"] is None, "calls without a model named are not priced"


def test_results_written_before_the_token_split_still_read_and_are_not_priced():
    results = Path(__file__).resolve().parents[1] / "bench" / "results" / "reviser"
    old = json.loads((results / "vllm-embedded-uncompiled-structured_on.json").read_text())
    rows = [BundleScore.model_validate(r) for r in old["rows"]]
    assert any(r.llm_tokens for r in rows) and not any(r.prompt_tokens or r.completion_tokens for r in rows)
    s = summary(rows, "openai/gpt-4o-mini")
    assert s["usd"] is None and "apart" in s["usd_note"], "a total cannot be priced as prompt or completion"


def test_the_oracle_answer_passes_schema_parser_and_validator_on_every_bundle(bundles):
    from reviser_checks import oracle_row

    rows = [oracle_row(b, words) for b in bundles]
    assert all(r["passes"] for r in rows), [
        (r["bundle"], r["schema_accepts"], r["problems"]) for r in rows if not r["passes"]
    ]
    assert sum(r["edits"] for r in rows) > 0, "the oracle answers with edits, not only empty sets"


def test_every_validator_rule_refuses_the_answer_that_breaks_it(bundles):
    from reviser_checks import PERTURBATIONS, STORE_ONLY, perturbation_rows

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

    results = Path(__file__).resolve().parents[1] / "bench" / "results" / "reviser"
    doc = (Path(__file__).resolve().parents[1] / "docs" / "llm.md").read_text()
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


def test_a_recount_adds_the_kinds_column_and_keeps_what_was_measured(tmp_path, monkeypatch):
    """`--recount` on a committed result's answers (the kinds column stripped) gives the committed
    column back, and leaves every measured field as it was."""
    import reviser

    name = "vllm-embedded-select-structured_on-compiled"
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
    again = json.loads(reviser.recount(name, load(BUNDLES)).read_text())
    assert again["rows"] == committed["rows"]
    assert again["summary"] == committed["summary"]
    assert 0 < again["summary"]["kinds_as_rules"] < 1, "the compiled DELETEs are not all the rules' kinds"
