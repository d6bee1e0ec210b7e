"""The LLM reviser's prompt and answer, as data and records: the prompt file (`judges/reviser.yaml`),
the run settings that shape a call, the card names a call uses (C1..Cn) and back, and the reading of
an answer into typed edits. Shared by the reviser (pats.reviser.llm) and its DSPy program
(pats.reviser.program), below both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from pats.lm.faults import MalformedAnswer
from pats.lm.prompts import prompt_file, read_prompt_file
from pats.spec.models import ScaffoldSpec
from pats.types import AddEdit, Edit, ReviewMode, ScaffoldEntry, Verdict

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


class ReviserSettings(NamedTuple):
    """The run's scaffold settings that shape a reviser's call (its budget text and schema) and that a
    compiled program was compiled under."""

    min_citations: int = 2
    removal: bool = True
    add_only: bool = False
    task_plans: bool = True

    @classmethod
    def of(cls, scaffold: ScaffoldSpec) -> ReviserSettings:
        """A run's settings, from its scaffold section (grow mode only adds)."""
        return cls(scaffold.min_citations, scaffold.removes, scaffold.mode == "grow", scaffold.task_plans)


class CardAliases:
    """Short names for the cards one call shows (C1..Cn, in the order shown) and back: ALFWorld card
    ids run to ~40 tokens each, which a small model copies badly and which fill its context. The prompt
    and the schema use the names; the answer's citations are mapped back to ids before validation, and
    the validator's problems are told in names again when they go back as feedback."""

    def __init__(self, ids: Sequence[str]):
        self.names = [f"C{i + 1}" for i in range(len(ids))]
        self.ids = list(ids)
        self._to_id = dict(zip(self.names, self.ids, strict=True))

    def to_ids(self, edits: Sequence[Edit]) -> list[Edit]:
        """The edits with each cited name replaced by its card id (an unknown name stays as written,
        for the validator to name)."""
        return [e.model_copy(update={"cites": tuple(self._to_id.get(c, c) for c in e.cites)}) for e in edits]

    def to_names(self, edits: Sequence[Edit]) -> list[Edit]:
        """The edits with each cited card id replaced by its name (a demo's answer, as the model gives it)."""
        to_name = dict(zip(self.ids, self.names, strict=True))
        return [e.model_copy(update={"cites": tuple(to_name.get(c, c) for c in e.cites)}) for e in edits]

    def in_order(self, edits: Sequence[Edit], entries: Sequence[ScaffoldEntry]) -> list[Edit]:
        """The edits in the order the schema asks for (`edit_schema`): UPDATEs and DELETEs in the
        entries' order, then skill and plan ADDs, then mistake ADDs; each edit's citations in the order
        the cards are shown (`cites_schema`: the first ones strictly in card order, so distinct)."""
        rank = {card_id: i for i, card_id in enumerate(self.ids)}
        position = {e.id: i for i, e in enumerate(entries)}

        def place(edit: Edit) -> tuple[int, int]:
            if isinstance(edit, AddEdit):
                return (1, 0) if edit.kind in ("skill", "plan") else (2, 0)
            return (0, position.get(edit.entry_id, len(position)))

        return [
            e.model_copy(update={"cites": tuple(sorted(e.cites, key=lambda c: rank.get(c, len(rank))))})
            for e in sorted(edits, key=place)
        ]

    def in_text(self, text: str) -> str:
        """`text` with card ids replaced by their names (longest ids first: one may prefix another)."""
        for card_id, name in sorted(zip(self.ids, self.names, strict=True), key=lambda p: -len(p[0])):
            text = text.replace(card_id, name)
        return text
