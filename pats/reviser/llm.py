"""The LLM reviser: a DSPy program that turns one task type's review into typed scaffold edits.

Inputs: the review mode and the text of its budget, the type's statistics, its evidence cards (all
cards passed in, privileged ones included only if the caller passed them), the judge's verdicts, the
current entries, and `feedback` (the validation errors of a refused first attempt). Output: a JSON list
of ADD / UPDATE / DELETE edits, validated into `pats.types` records. The instructions, the edit format,
and the budget texts are data: `judges/reviser.yaml`.

Structured output (`llm.structured`, see pats.lm): the answer's JSON schema is built per call from the
edit records (`edit_schema`), narrowed to what the call shows: the ops and entry kinds the mode and the
run allow, the scopes of this type (a plan only at a task scope), the ids of the entries it may edit,
and the ids of the cards shown as the only citations, at least `min_citations` of them. A server that
enforces the schema cannot answer with an op, scope, entry or card that is not there.

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
    cites_schema,
    enum,
    prompt_file,
    read_prompt_file,
    record_schema,
    render_assessment,
    render_cards,
    render_entries,
)
from pats.scaffold.validate import MODE_BUDGETS, type_scopes
from pats.spec.models import LLMReviserSpec
from pats.types import (
    AddEdit,
    Assessment,
    DeleteEdit,
    Edit,
    EvidenceCard,
    LLMUsage,
    ReviewMode,
    ScaffoldEntry,
    UpdateEdit,
    Verdict,
)

EDIT_LIST = TypeAdapter(list[Edit])
# The schema's bound on an edit's text or reason: the prompt asks for at most two sentences, and a small
# model under a schema otherwise writes until max_tokens and never reaches its citations.
TEXT_MAX_CHARS = 300


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


def edit_schema(
    mode: ReviewMode,
    task_type: str,
    cards: Sequence[EvidenceCard],
    entries: Sequence[ScaffoldEntry],
    *,
    min_citations: int,
    removal: bool,
    add_only: bool,
) -> dict[str, Any]:
    """The JSON schema of one call's answer, `{"edits": [...]}`, from AddEdit, UpdateEdit and DeleteEdit
    narrowed to this call: the mode's ops and kinds (MODE_BUDGETS), this type's scopes (plans only at
    task scopes), the entries within them, and the ids of `cards` (the cards shown) as citations. What
    no enum can say (how many ADDs a mode allows, no near-duplicates, COMPRESS shrinking) stays the
    validator's."""
    budget = MODE_BUDGETS[ReviewMode(mode)]
    card_ids = [c.id for c in cards]
    scopes = sorted(type_scopes(task_type, {c.task_id for c in cards}))
    editable = [e.id for e in entries if e.scope in scopes]
    cites = cites_schema(card_ids, min_citations)
    text = {"type": "string", "minLength": 1, "maxLength": TEXT_MAX_CHARS}
    variants: list[dict[str, Any]] = []
    if min_citations > len(card_ids):  # no edit can cite enough cards: only the empty set is valid
        return {
            "type": "object",
            "properties": {"edits": {"type": "array", "maxItems": 0}},
            **_strict(["edits"]),
        }
    kinds = [k for k, n in (("skill", budget.skills), ("mistake", budget.mistakes)) if n is None or n > 0]
    compress_blocked = mode is ReviewMode.COMPRESS and not removal
    if kinds and not compress_blocked:
        variants.append(
            record_schema(
                AddEdit,
                {
                    "op": enum(["ADD"]),
                    "kind": enum(kinds),
                    "scope": enum(scopes),
                    "text": text,
                    "cites": cites,
                },
            )
        )
        task_scopes = [s for s in scopes if s.startswith("task:")]
        if "skill" in kinds and task_scopes:  # plans count as skills and belong to one task
            variants.append(
                record_schema(
                    AddEdit,
                    {
                        "op": enum(["ADD"]),
                        "kind": enum(["plan"]),
                        "scope": enum(task_scopes),
                        "text": text,
                        "cites": cites,
                    },
                )
            )
    if editable and not add_only and not compress_blocked:
        target = {"entry_id": enum(editable), "cites": cites}
        if budget.update:
            variants.append(record_schema(UpdateEdit, {"op": enum(["UPDATE"]), "text": text, **target}))
        if budget.delete and removal:
            variants.append(record_schema(DeleteEdit, {"op": enum(["DELETE"]), "reason": text, **target}))
    if not variants:
        return {
            "type": "object",
            "properties": {"edits": {"type": "array", "maxItems": 0}},
            **_strict(["edits"]),
        }
    # As many edits as the validator could accept: the mode's ADDs (COMPRESS's merges: one per entry
    # it replaces) and one UPDATE or DELETE per entry.
    targets = len(editable) if editable and not add_only and (budget.update or budget.delete) else 0
    adds = sum(targets if n is None else n for n in (budget.skills, budget.mistakes) if n is None or n > 0)
    edits = {"type": "array", "items": {"anyOf": variants}, "maxItems": max(1, adds + targets)}
    return {"type": "object", "properties": {"edits": edits}, **_strict(["edits"])}


def _strict(required: list[str]) -> dict[str, Any]:
    return {"required": required, "additionalProperties": False}


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
        # The review passes every type's cards; this type's are the evidence for its edits.
        shown = [c for c in cards if c.task_type == assessment.task_type]
        schema = edit_schema(
            mode,
            assessment.task_type,
            shown,
            entries,
            min_citations=self.min_citations,
            removal=self.removal,
            add_only=self.add_only,
        )
        return await self.caller.call(
            self.program,
            parse=lambda prediction: edits_from_answer(prediction.edits),
            schema=("pats_edits", schema),
            task_type=assessment.task_type,
            mode=mode.value,
            budget=budget,
            review=render_assessment(assessment),
            cards=render_cards(shown),
            verdicts=render_verdicts(assessment.verdicts),
            entries=render_entries(entries),
            feedback=render_feedback(feedback),
        )
