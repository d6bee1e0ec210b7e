"""The LLM reviser: a DSPy program that turns one task type's review into typed scaffold edits.

Inputs: the review mode and the text of its budget, the type's statistics, its evidence cards (all
cards passed in, privileged ones included only if the caller passed them), the judge's verdicts, the
current entries, and `feedback` (the validation errors of a refused first attempt). Output: a JSON list
of ADD / UPDATE / DELETE edits, validated into `pats.types` records. The instructions, the edit format,
and the budget texts are data: `judges/reviser.yaml`.

It does not check budgets, citations or duplicates itself: the review (`pats.review`) validates the
set, retries once with the errors as `feedback`, then falls back to the rules reviser. An answer
that is not an edit list in the schema is counted as `malformed` and retried; when retries run out,
`revise` raises JudgeError.

Where it departs from the published method: the mode's budget is stated to the LLM in words and then
enforced by the validator, instead of trusting the LLM to keep it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from pats.lm import (
    LLMCaller,
    MalformedAnswer,
    prompt_file,
    read_prompt_file,
    render_assessment,
    render_cards,
    render_entries,
)
from pats.spec.models import LLMReviserSpec
from pats.types import Assessment, Edit, EvidenceCard, LLMUsage, ReviewMode, ScaffoldEntry, Verdict

EDIT_LIST = TypeAdapter(list[Edit])


class ReviserPrompt(BaseModel):
    """`judges/reviser.yaml`: the reviser's instructions, edit format and per-mode budget texts."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    instructions: str = Field(min_length=1)
    edit_format: str = Field(min_length=1)
    citations: str = Field(min_length=1, description="Citation rule; {min_citations} is filled in.")
    no_removal: str = Field(min_length=1, description="Added to the budget when removal is off.")
    add_only: str = Field(min_length=1, description="Added to the budget in grow mode (ADD only).")
    modes: dict[ReviewMode, str]

    @model_validator(mode="after")
    def _every_mode(self):
        missing = [m.value for m in ReviewMode if not self.modes.get(m, "").strip()]
        if missing:
            raise ValueError(f"modes: describe every review mode; missing {', '.join(missing)}")
        return self

    def budget(self, mode: ReviewMode, *, min_citations: int, removal: bool, add_only: bool) -> str:
        parts = [self.modes[mode].strip()]
        if min_citations > 0:
            parts.append(self.citations.strip().format(min_citations=min_citations))
        if not removal:
            parts.append(self.no_removal.strip())
        if add_only:
            parts.append(self.add_only.strip())
        return "\n".join(parts)


def load_reviser_prompt(path: str | None = None) -> ReviserPrompt:
    return read_prompt_file(prompt_file(path, "reviser.yaml"), ReviserPrompt)


def render_verdicts(verdicts: Sequence[Verdict]) -> str:
    if not verdicts:
        return "(no verdicts)"
    lines = []
    for v in verdicts:
        cites = f" (cites {', '.join(v.cites)})" if v.cites else ""
        lines.append(f"[{v.entry_id}] {v.label}: {v.reason}{cites}")
    return "\n".join(lines)


def render_feedback(feedback: Sequence[str]) -> str:
    if not feedback:
        return "none: this is the first attempt"
    return "Your previous edit set was refused:\n" + "\n".join(f"- {line}" for line in feedback)


def edits_from_answer(answer: Any) -> list[Edit]:
    """The typed edits of an answer, or MalformedAnswer naming what is wrong with its schema."""
    try:
        return EDIT_LIST.validate_python(answer)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in err.errors(include_url=False)[:5]
        )
        raise MalformedAnswer(f"malformed edit list: {problems}") from None


def revise_program(prompt: ReviserPrompt):
    """A dspy.Predict with the reviser's signature (built lazily: dspy is slow to import)."""
    import dspy

    class ReviseScaffold(dspy.Signature):
        task_type: str = dspy.InputField(desc="the task type under review")
        mode: str = dspy.InputField(desc="the review mode")
        budget: str = dspy.InputField(desc="what edits this mode allows; keep to it")
        review: str = dspy.InputField(desc="the statistics of this task type")
        cards: str = dspy.InputField(desc="evidence cards, each headed by its [card id]")
        verdicts: str = dspy.InputField(desc="the judge's verdicts on the current entries")
        entries: str = dspy.InputField(desc="current scaffold entries, each headed by its [entry id]")
        feedback: str = dspy.InputField(desc="problems of your previous answer to fix, if any")
        edits: list[dict[str, Any]] = dspy.OutputField(desc=prompt.edit_format.strip())

    return dspy.Predict(ReviseScaffold.with_instructions(prompt.instructions.strip()))


class LLMReviser:
    """Reviser protocol over any LiteLLM model; `faults` counts failed attempts by kind."""

    def __init__(
        self,
        spec: LLMReviserSpec,
        *,
        min_citations: int = 2,
        removal: bool = True,
        add_only: bool = False,
        lm: Any = None,
        prompt: ReviserPrompt | None = None,
    ):
        self.prompt = prompt if prompt is not None else load_reviser_prompt()
        self.min_citations, self.removal, self.add_only = min_citations, removal, add_only
        self.caller = LLMCaller(spec.llm, lm)
        self.program = revise_program(self.prompt)

    @property
    def faults(self):
        return self.caller.faults

    def usage(self) -> LLMUsage:
        return self.caller.usage()

    async def revise(
        self,
        step: int,
        assessment: Assessment,
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
        feedback: Sequence[str] = (),
    ) -> list[Edit]:
        mode = ReviewMode(assessment.mode)
        budget = self.prompt.budget(
            mode, min_citations=self.min_citations, removal=self.removal, add_only=self.add_only
        )
        return await self.caller.call(
            self.program,
            parse=lambda prediction: edits_from_answer(prediction.edits),
            task_type=assessment.task_type,
            mode=mode.value,
            budget=budget,
            review=render_assessment(assessment),
            # The review passes every type's cards; this type's are the evidence for its edits.
            cards=render_cards([c for c in cards if c.task_type == assessment.task_type]),
            verdicts=render_verdicts(assessment.verdicts),
            entries=render_entries(entries),
            feedback=render_feedback(feedback),
        )
