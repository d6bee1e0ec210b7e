"""The LLM reviser: typed edits from the answer, schema errors retried then raised, feedback shown."""

from __future__ import annotations

import json

import dspy
import pytest
from dspy.utils import DummyLM

from pats.errors import JudgeError, SpecError
from pats.protocols import Reviser
from pats.reviser.llm import LLMReviser, load_reviser_prompt
from pats.reviser.prompt import ReviserSettings
from pats.spec.models import LLMReviserSpec, LLMSpec
from pats.testing import ScriptedOpenAIServer, card_facts
from pats.types import (
    AddEdit,
    Assessment,
    DeleteEdit,
    EvidenceCard,
    ReviewMode,
    ScaffoldEntry,
    UpdateEdit,
    Verdict,
)


def card(id: str, task_type: str, text: str, privileged: bool = False) -> EvidenceCard:
    return EvidenceCard(
        id=id,
        type="expert" if privileged else "failure",
        step=5,
        task_id=f"{task_type}-1",
        task_type=task_type,
        scaffold_version="v2",
        text=text,
        tokens=8,
        data=card_facts("expert" if privileged else "failure"),
        privileged=privileged,
    )


CARDS = [
    card("c5-twc-1-outcome", "twc", "success 0.12 over 8 rollouts"),
    card("c5-twc-1-failure", "twc", "invalid action 'pick up shirt' 7 times"),
    card("c5-twc-1-expert", "twc", "left the gold path at turn 2", privileged=True),
    card("c5-coin-1-outcome", "coin", "COIN-ONLY-EVIDENCE success 1.0"),
]
ENTRIES = [
    ScaffoldEntry(
        id="s1",
        kind="skill",
        scope="type:twc",
        text="Use 'pick up X'.",
        tokens=6,
        created_step=1,
        updated_step=1,
    ),
    ScaffoldEntry(
        id="m1",
        kind="mistake",
        scope="general",
        text="Avoid loops.",
        tokens=3,
        created_step=1,
        updated_step=1,
    ),
]
ASSESSMENT = Assessment(
    task_type="twc",
    mode=ReviewMode.REVISE,
    ema_success=0.35,
    pressure=0.2,
    utility=0.1,
    verdicts=(
        Verdict(entry_id="s1", label="harmful", reason="the game says 'take'", cites=("c5-twc-1-failure",)),
        Verdict(entry_id="m1", label="unscored", reason="no grade"),
    ),
)
EDITS = [
    {"op": "ADD", "kind": "skill", "scope": "type:twc", "text": "Use 'take X'.",
     "cites": ["c5-twc-1-failure", "c5-twc-1-outcome"]},
    {"op": "UPDATE", "entry_id": "m1", "text": "Do not repeat an action.",
     "cites": ["c5-twc-1-failure", "c5-twc-1-outcome"]},
    {"op": "DELETE", "entry_id": "s1", "reason": "harmful syntax",
     "cites": ["c5-twc-1-failure", "c5-twc-1-outcome"]},
]  # fmt: skip


def make_reviser(lm=None, **llm) -> LLMReviser:
    spec = LLMReviserSpec(
        llm=LLMSpec(**{"model": "openai/reviser", "max_retries": 1, "backoff_s": 0.0, **llm})
    )
    return LLMReviser(spec, ReviserSettings(min_citations=2), lm=lm)


def prompt_of(lm: DummyLM, call: int = -1) -> str:
    return "\n".join(m["content"] for m in lm.history[call]["messages"])


async def test_valid_answer_gives_typed_edits():
    lm = DummyLM([{"edits": EDITS}])
    reviser = make_reviser(lm)
    assert isinstance(reviser, Reviser)
    edits = await reviser.revise(5, ASSESSMENT, CARDS, ENTRIES)
    assert [type(e) for e in edits] == [AddEdit, UpdateEdit, DeleteEdit]
    assert edits[0] == AddEdit(
        kind="skill", scope="type:twc", text="Use 'take X'.", cites=("c5-twc-1-failure", "c5-twc-1-outcome")
    )
    assert edits[2].entry_id == "s1" and edits[2].reason == "harmful syntax"
    assert reviser.faults == {}

    prompt = prompt_of(lm)
    assert "REVISE: the agent succeeds some of the time" in prompt  # the mode's budget text
    assert "at least 2 distinct card names" in prompt
    assert "[s1] harmful: the game says 'take' (cites C2)" in prompt  # verdicts, cards by their names
    assert "[C2] failure card, task twc-1\ninvalid action" in prompt and "c5-twc-1-failure" not in prompt
    assert "[m1] mistake, scope general: Avoid loops." in prompt  # entries
    assert "left the gold path" in prompt and "privileged" in prompt  # passed, so shown, and marked
    assert "COIN-ONLY-EVIDENCE" not in prompt  # another type's card
    assert "none: this is the first attempt" in prompt
    assert "maintain the training scaffold" in prompt  # instructions from judges/reviser.yaml
    assert dspy.settings.lm is None


async def test_empty_answer_is_no_edits():
    assert await make_reviser(DummyLM([{"edits": []}])).revise(5, ASSESSMENT, CARDS, ENTRIES) == []


@pytest.mark.parametrize(
    "bad",
    [
        [{"op": "MERGE", "entry_id": "s1", "cites": []}],  # unknown op
        [{"op": "ADD", "kind": "hint", "scope": "general", "text": "x", "cites": []}],  # unknown kind
        [{"op": "UPDATE", "entry_id": "s1", "cites": []}],  # no text
        [{"op": "DELETE", "entry_id": "s1", "reason": "r", "cites": [], "text": "extra key"}],
        "Here are my edits: add a skill about taking items.",  # not JSON at all
    ],
)
async def test_wrong_schema_raises_after_retries(bad):
    lm = DummyLM([{"edits": bad}, {"edits": bad}])
    reviser = make_reviser(lm)  # max_retries=1: two attempts
    with pytest.raises(JudgeError, match="malformed"):
        await reviser.revise(5, ASSESSMENT, CARDS, ENTRIES)
    assert reviser.faults == {"malformed": 2}
    assert len(lm.history) == 2


async def test_schema_error_then_valid_answer():
    lm = DummyLM([{"edits": [{"op": "ADD"}]}, {"edits": EDITS[:1]}])
    reviser = make_reviser(lm)
    edits = await reviser.revise(5, ASSESSMENT, CARDS, ENTRIES)
    assert len(edits) == 1 and reviser.faults == {"malformed": 1}


async def test_feedback_reaches_the_prompt():
    lm = DummyLM([{"edits": EDITS[:1]}])
    feedback = ["edit 0 (ADD skill type:twc): cites 1 distinct card(s); cite at least 2 distinct card ids"]
    await make_reviser(lm).revise(5, ASSESSMENT, CARDS, ENTRIES, feedback=feedback)
    prompt = prompt_of(lm)
    assert "Your previous edit set was refused" in prompt
    assert feedback[0] in prompt
    assert "first attempt" not in prompt


async def test_budget_text_follows_mode_and_run_settings():
    lm = DummyLM([{"edits": []}])
    spec = LLMReviserSpec(llm=LLMSpec(model="openai/reviser", max_retries=0))
    reviser = LLMReviser(spec, ReviserSettings(min_citations=3, removal=False, add_only=True), lm=lm)
    pruning = ASSESSMENT.model_copy(update={"mode": ReviewMode.PRUNE})
    await reviser.revise(5, pruning, CARDS, ENTRIES)
    prompt = prompt_of(lm)
    assert "PRUNE: this type's scaffold is over its size budget" in prompt
    assert "at least 3 distinct card names" in prompt
    assert "Removal is switched off" in prompt and "grow mode" in prompt
    assert "REVISE: the agent succeeds" not in prompt


async def test_through_http_server(monkeypatch):
    monkeypatch.setenv("PATS_TEST_REVISER_KEY", "sk-test-SECRET123")
    wire = f"[[ ## edits ## ]]\n{json.dumps(EDITS[:2])}\n\n[[ ## completed ## ]]"
    script = [{"status": 429, "retry_after": 0.05}, '[[ ## edits ## ]]\n[{"op": "ADD"}]', wire]
    feedback = ["edit 1 (UPDATE m1): text is a near-duplicate of entry 's1'"]
    with ScriptedOpenAIServer(script) as server:
        reviser = make_reviser(
            api_base=server.base_url, api_key_env="PATS_TEST_REVISER_KEY", max_retries=2, timeout_s=2.0
        )
        edits = await reviser.revise(5, ASSESSMENT, CARDS, ENTRIES, feedback=feedback)
    assert [e.op for e in edits] == ["ADD", "UPDATE"]
    assert reviser.faults == {"rate_limit": 1, "malformed": 1}
    assert len(server.requests) == 3
    assert all(feedback[0] in prompt for prompt in server.prompts())


def test_bad_reviser_prompt_reports_every_problem(write):
    path = write("reviser.yaml", "instructions: hi\nmodes: {EXPAND: grow, SHRINK: x}\n")
    with pytest.raises(SpecError) as info:
        load_reviser_prompt(str(path))
    message = str(info.value)
    assert "edit_format" in message and "SHRINK" in message
