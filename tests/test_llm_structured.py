"""Structured answers (issue 36): the JSON schema of the reviser's and the judge's answers, built from their
records and the cards shown; `llm.structured` on / off / auto and the probe that decides auto; and the
cost counts held against the scripted server's own log of what it answered.

All against `pats.testing.ScriptedOpenAIServer` on 127.0.0.1 (a real HTTP server): `structured=True`
plays a server that enforces schemas, the default a server that refuses `response_format`.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from pats.judges.llm import GRADE_LABELS, LLMJudge, verdict_schema
from pats.lm.probe import structured_decision
from pats.lm.schema import CITES_MAX, cites_schema, enum
from pats.reviser.llm import LLMReviser, edit_schema
from pats.reviser.prompt import ReviserSettings
from pats.spec.models import ExperimentSpec, LLMJudgeSpec, LLMReviserSpec, LLMSpec, ScaffoldBudget
from pats.testing import ScriptedOpenAIServer, card_facts
from pats.types import AddEdit, Assessment, EvidenceCard, ReviewMode, ScaffoldEntry, UpdateEdit

KEY_ENV = "PATS_TEST_STRUCTURED_KEY"


def card(id: str, task_type: str, task_id: str) -> EvidenceCard:
    return EvidenceCard(
        id=id,
        type="failure",
        step=3,
        task_id=task_id,
        task_type=task_type,
        scaffold_version="v1",
        text=f"card {id}",
        tokens=4,
        data=card_facts("failure"),
    )


CARDS = [
    card("c3-a-fail", "twc", "twc-a"),
    card("c3-b-fail", "twc", "twc-b"),
    card("c3-x-fail", "coin", "coin-x"),
]
ENTRIES = [
    ScaffoldEntry(
        id="e1", kind="skill", scope="type:twc", text="Take it.", tokens=3, created_step=0, updated_step=0
    ),
    ScaffoldEntry(
        id="e2", kind="mistake", scope="general", text="No loops.", tokens=3, created_step=0, updated_step=0
    ),
    ScaffoldEntry(
        id="e3", kind="plan", scope="task:twc-zzz", text="Go.", tokens=1, created_step=0, updated_step=0
    ),  # a task that no card shows: not this review's to edit
]
ASSESSMENT = Assessment(task_type="twc", mode=ReviewMode.REVISE, ema_success=0.4, pressure=0.1)


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-test-structured")


def llm(server: ScriptedOpenAIServer, **fields) -> LLMSpec:
    base = {"model": "openai/scripted", "api_base": server.base_url, "api_key_env": KEY_ENV, "timeout_s": 5.0}
    return LLMSpec(**{**base, "max_retries": 0, **fields})


def variants(schema: dict) -> dict[tuple[str, str], list[dict]]:
    """(op, kind) -> the schemas of that edit variant among the schema's `$defs` (one per entry for
    UPDATE and DELETE)."""
    found: dict[tuple[str, str], list[dict]] = {}
    for definition in schema.get("$defs", {}).values():
        for v in definition.get("anyOf", [definition]):
            key = (
                v["properties"]["op"]["enum"][0],
                ",".join(v["properties"].get("kind", {}).get("enum", [])),
            )
            found.setdefault(key, []).append(v)
    return found


def accepts(schema: dict, value) -> bool:
    import jsonschema

    return jsonschema.Draft202012Validator(schema).is_valid(value)


# -- the schema ----------------------------------------------------------------------------------------


def test_edit_schema_enums_are_exactly_the_scopes_entries_and_cards_shown():
    shown = [c for c in CARDS if c.task_type == "twc"]
    schema = edit_schema(
        ReviewMode.REVISE, "twc", shown, ENTRIES, min_citations=2, removal=True, add_only=False
    )
    by = variants(schema)
    assert set(by) == {("ADD", "skill"), ("ADD", "mistake"), ("ADD", "plan"), ("UPDATE", ""), ("DELETE", "")}
    (add,), (plan,) = by["ADD", "skill"], by["ADD", "plan"]
    assert add["properties"]["scope"]["enum"] == ["general", "task:twc-a", "task:twc-b", "type:twc"]
    assert plan["properties"]["scope"]["enum"] == ["task:twc-a", "task:twc-b"]  # a plan belongs to one task
    for variant in (v for vs in by.values() for v in vs):
        cites = variant["properties"]["cites"]  # two cards: one branch, [a, b] in card order
        assert cites["items"]["enum"] == ["c3-a-fail", "c3-b-fail"] and cites["minItems"] == 2
        assert cites["prefixItems"] == [{"const": "c3-a-fail"}, {"type": "string", "enum": ["c3-b-fail"]}]
        assert variant["additionalProperties"] is False and set(variant["required"]) == set(
            variant["properties"]
        )
    # e3 is scoped to a task no card shows: the validator would refuse editing it, so no schema offers it.
    assert [v["properties"]["entry_id"]["enum"] for v in by["UPDATE", ""]] == [["e1"], ["e2"]]
    assert [v["properties"]["entry_id"]["enum"] for v in by["DELETE", ""]] == [["e1"], ["e2"]]
    # The fields are the records' own: a field added to AddEdit or UpdateEdit reaches the schema.
    assert set(add["properties"]) == set(AddEdit.model_fields)
    assert set(by["UPDATE", ""][0]["properties"]) == set(UpdateEdit.model_fields)

    # The list: each entry at most once, first, in order; then at most one skill or plan and one mistake.
    def edit(op, **fields):
        base = {"ADD": {"kind": "skill", "scope": "type:twc", "text": "t"}, "UPDATE": {"text": "t"}}
        return {"op": op, **base.get(op, {"reason": "r"}), "cites": ["c3-a-fail", "c3-b-fail"], **fields}

    e1, e2 = edit("UPDATE", entry_id="e1"), edit("DELETE", entry_id="e2")
    mistake = edit("ADD", kind="mistake")
    assert accepts(schema, {"edits": [e1, e2, edit("ADD"), mistake]})
    assert not accepts(schema, {"edits": [e1, e1]}), "one entry edited twice"
    assert not accepts(schema, {"edits": [e2, e1]}), "entries out of order"
    assert not accepts(schema, {"edits": [edit("ADD"), edit("ADD", text="u")]}), "REVISE: one skill ADD"
    assert not accepts(schema, {"edits": [mistake, edit("ADD")]}), "skills before mistakes"
    assert accepts(schema, {"edits": []})


def test_edit_schema_follows_the_mode_and_the_run():
    shown = [c for c in CARDS if c.task_type == "twc"]

    def schema(mode, **run):
        return edit_schema(
            mode, "twc", shown, ENTRIES, **{"min_citations": 1, "removal": True, "add_only": False, **run}
        )

    def ops(mode, **run):
        return sorted(variants(schema(mode, **run)))

    assert ops(ReviewMode.PRUNE) == [("DELETE", "")]
    assert ops(ReviewMode.EXPAND) == [("ADD", "mistake"), ("ADD", "plan"), ("ADD", "skill"), ("UPDATE", "")]
    assert ops(ReviewMode.REVISE, removal=False) == [
        ("ADD", "mistake"),
        ("ADD", "plan"),
        ("ADD", "skill"),
        ("UPDATE", ""),
    ]
    assert ops(ReviewMode.REVISE, add_only=True) == [("ADD", "mistake"), ("ADD", "plan"), ("ADD", "skill")]
    assert ops(ReviewMode.COMPRESS, removal=False) == []  # only the empty set is valid
    assert schema(ReviewMode.COMPRESS, removal=False)["properties"]["edits"] == {
        "type": "array",
        "maxItems": 0,
    }
    # More citations asked than cards shown: only the empty set can be valid.
    assert ops(ReviewMode.REVISE, min_citations=3) == []
    # EXPAND: two skill or plan ADDs and one mistake; COMPRESS: ADDs only beside the entries they replace.
    add = {"op": "ADD", "kind": "skill", "scope": "type:twc", "text": "t", "cites": ["c3-a-fail"]}
    expand = schema(ReviewMode.EXPAND)
    assert accepts(expand, {"edits": [add, add]}) and not accepts(expand, {"edits": [add, add, add]})
    compress = schema(ReviewMode.COMPRESS)
    update = {"op": "UPDATE", "entry_id": "e1", "text": "t", "cites": ["c3-a-fail"]}
    assert not accepts(compress, {"edits": [add]}) and accepts(compress, {"edits": [update, add]})
    assert not accepts(compress, {"edits": [update, add, add]}), "no more ADDs than the entries edited"


def test_citations_are_capped_by_the_cards_shown_and_cites_max_not_below_the_minimum():
    ids = [f"c1-t{i}-fail" for i in range(10)]
    branches = cites_schema(ids, 2)["anyOf"]
    assert {b["maxItems"] for b in branches} == {CITES_MAX} and CITES_MAX == 4  # not one per card: 10
    assert {b["maxItems"] for b in cites_schema(ids[:3], 2)["anyOf"]} == {3}
    assert {(b["minItems"], b["maxItems"]) for b in cites_schema(ids, 6)["anyOf"]} == {(6, 6)}
    assert cites_schema(ids, 1) == {"type": "array", "items": enum(ids), "maxItems": 4, "minItems": 1}
    assert cites_schema([], 1) == {"type": "array", "maxItems": 0}


def test_citations_schema_forces_distinct_cards_without_unique_items():
    a, b, c = "C1", "C2", "C3"
    two = cites_schema([a, b, c], 2)
    assert "uniqueItems" not in json.dumps(two)
    assert [accepts(two, v) for v in ([a, a], [b, a], [c, c], [a])] == [False] * 4
    assert [accepts(two, v) for v in ([a, b], [a, c], [b, c], [a, b, a])] == [True] * 4
    assert len(two["anyOf"]) == 2  # a branch per first card but the last
    three = cites_schema([a, b, c, "C4"], 3)
    assert not accepts(three, [a, b, b]) and not accepts(three, [b, a, c]) and accepts(three, [a, c, "C4"])
    # Past DISTINCT_BRANCHES_MAX branches only the first two are forced apart (the validator counts on).
    many = [f"C{i}" for i in range(1, 41)]
    wide = cites_schema(many, 3)
    assert (
        len(wide["anyOf"]) == 39
        and not accepts(wide, ["C1", "C1", "C2"])
        and accepts(wide, ["C1", "C2", "C2"])
    )


def test_verdict_schema_is_one_grade_per_entry_shown_citing_cards_shown():
    schema = verdict_schema(["e1", "e2"], ["c3-a-fail", "c3-b-fail"])
    verdicts = schema["properties"]["verdicts"]
    assert verdicts["minItems"] == verdicts["maxItems"] == 2
    item = verdicts["items"]["properties"]
    assert item["entry_id"]["enum"] == ["e1", "e2"]
    assert item["label"]["enum"] == list(GRADE_LABELS)  # never "unscored": that is the judge's own word
    assert item["cites"]["items"]["enum"] == ["c3-a-fail", "c3-b-fail"] and item["cites"]["minItems"] == 1


# -- on, off, auto -------------------------------------------------------------------------------------


EDIT = {
    "op": "ADD",
    "kind": "skill",
    "scope": "type:twc",
    "text": "Take the item.",
    "cites": ["c3-a-fail", "c3-b-fail"],
}


async def revise(server: ScriptedOpenAIServer, structured: str) -> LLMReviser:
    reviser = LLMReviser(
        LLMReviserSpec(llm=llm(server, structured=structured)), ReviserSettings(min_citations=2)
    )
    edits = await reviser.revise(3, ASSESSMENT, CARDS, ENTRIES)
    assert edits == [AddEdit(**EDIT)]
    return reviser


async def test_on_sends_the_schema_and_reads_the_json_answer():
    with ScriptedOpenAIServer([json.dumps({"edits": [EDIT]})], structured=True) as server:
        await revise(server, "on")
    (body,) = server.requests
    sent = body["response_format"]
    assert sent["type"] == "json_schema" and sent["json_schema"]["name"] == "pats_edits"
    shown = [c for c in CARDS if c.task_type == "twc"]
    want = edit_schema(
        ReviewMode.REVISE,
        "twc",
        shown,
        ENTRIES,
        min_citations=2,
        removal=True,
        add_only=False,
        card_ids=[f"C{i + 1}" for i in range(len(shown))],
    )
    assert sent["json_schema"]["schema"] == want
    assert "C1" in json.dumps(want) and shown[0].id not in json.dumps(want), "the schema names cards C1.."
    assert not server.probes, "on needs no probe"


async def test_off_sends_no_schema_and_reads_dspy_fields():
    wire = f"[[ ## edits ## ]]\n{json.dumps([EDIT])}\n\n[[ ## completed ## ]]"
    with ScriptedOpenAIServer([wire], structured=True) as server:
        await revise(server, "off")
    (body,) = server.requests
    assert "response_format" not in body and not server.probes


async def test_auto_follows_the_probe(capsys):
    with ScriptedOpenAIServer([json.dumps({"edits": [EDIT]})], structured=True) as server:
        reviser = await revise(server, "auto")
    assert len(server.probes) == 1 and "response_format" in server.requests[0]
    assert reviser.caller.structured is True
    assert "structured output on" in capsys.readouterr().err

    wire = f"[[ ## edits ## ]]\n{json.dumps([EDIT])}\n\n[[ ## completed ## ]]"
    with ScriptedOpenAIServer([wire]) as server:  # refuses response_format (400)
        reviser = await revise(server, "auto")
    assert len(server.probes) == 1 and "response_format" not in server.requests[0]
    assert reviser.caller.structured is False and reviser.faults == {}, "a refused probe is an answer"
    assert "structured output off" in capsys.readouterr().err


async def test_auto_off_when_the_probe_answer_ignores_the_schema():
    """A server that takes the field without enforcing it (transformers serve ignores it): prose to the
    probe turns structured output off."""
    wire = f"[[ ## edits ## ]]\n{json.dumps([EDIT])}\n\n[[ ## completed ## ]]"
    with ScriptedOpenAIServer([wire], structured=True, probe="ok, here you go") as server:
        reviser = await revise(server, "auto")
    assert len(server.probes) == 1 and "response_format" not in server.requests[0]
    assert reviser.caller.structured is False


async def test_judge_sends_its_schema_when_on():
    answer = {"verdicts": [{"entry_id": "e1", "label": "stale", "reason": "old", "cites": ["c3-a-fail"]}]}
    with ScriptedOpenAIServer([json.dumps(answer)], structured=True) as server:
        judge = LLMJudge(LLMJudgeSpec(llm=llm(server, structured="on")), ScaffoldBudget(), "twx")
        graded = await judge._grade(ASSESSMENT, CARDS[:2], ENTRIES[:1])
    (body,) = server.requests
    assert body["response_format"]["json_schema"]["schema"] == verdict_schema(
        ["e1"], ["c3-a-fail", "c3-b-fail"]
    )
    assert [(v.entry_id, v.label, v.cites) for v in graded.verdicts] == [("e1", "stale", ("c3-a-fail",))]


def test_preflight_probe_decides_auto_for_the_run(capsys):
    from pats.llm_check import preflight

    with ScriptedOpenAIServer(structured=True) as server:
        spec = ExperimentSpec.model_validate(
            {
                "name": "structured",
                "environment": {"kind": "twx"},
                "scaffold": {"mode": "pats"},
                "judge": {"kind": "llm", "llm": llm(server).model_dump()},
                "reviser": {"kind": "llm", "llm": llm(server).model_dump()},
            }
        )
        preflight(spec)
        assert len(server.preflights) == 1 and len(server.probes) == 1, "one endpoint: asked and probed once"
        assert structured_decision(spec.reviser.llm) is True
        # A reviser built after the preflight uses its decision without a probe of its own.
        reviser = LLMReviser(spec.reviser, ReviserSettings(min_citations=2))
        server.add(json.dumps({"edits": [EDIT]}))
        asyncio.run(reviser.revise(3, ASSESSMENT, CARDS, ENTRIES))
        assert len(server.probes) == 1 and "response_format" in server.requests[-1]
    assert "reviser.llm" in capsys.readouterr().err


# -- what is counted -----------------------------------------------------------------------------------


async def test_counts_match_the_servers_log_failed_and_malformed_calls_included():
    """Every request the server handled is a call; the tokens are those it reported, unusable answers
    included; the seconds of failed calls count too."""
    script = [
        {"status": 503},  # failed
        "prose without fields",  # malformed: answered, unusable
        {"malformed": True},  # a broken body
        {"delay": 0.3, "text": "[[ ## edits ## ]]\n[]\n\n[[ ## completed ## ]]"},  # usable, slow
    ]
    with ScriptedOpenAIServer(script) as server:
        reviser = LLMReviser(
            LLMReviserSpec(llm=llm(server, max_retries=3, backoff_s=0.0)), ReviserSettings(min_citations=2)
        )
        assert await reviser.revise(3, ASSESSMENT, CARDS, ENTRIES) == []
        log = list(server.answered)
    usage = reviser.usage()
    assert [a.kind for a in log] == ["probe"] + ["script"] * 4
    assert usage.calls == len(log) == 5  # the probe, three failed attempts, one answer
    assert usage.faults == 3 and usage.malformed == 2
    assert usage.tokens == sum(a.tokens for a in log) > 0
    assert usage.seconds >= 0.3
