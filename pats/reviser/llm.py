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

from collections.abc import Callable, Sequence
from itertools import combinations
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from pats.lm import (
    LLMCaller,
    MalformedAnswer,
    Probe,
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
    Refinement,
    ReviewMode,
    ScaffoldEntry,
    UpdateEdit,
    Verdict,
)

EDIT_LIST = TypeAdapter(list[Edit])
# The review's check of one type's edit set: (edits, assessment, entries, cards) -> problems (none: valid).
Check = Callable[[Sequence[Edit], Assessment, Sequence[ScaffoldEntry], Sequence[EvidenceCard]], list[str]]
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


MAX_SEQUENCES = 128  # branches of the edit-list schema (edit_schema); past it, fewer entries per set


def edit_schema(
    mode: ReviewMode,
    task_type: str,
    cards: Sequence[EvidenceCard],
    entries: Sequence[ScaffoldEntry],
    *,
    min_citations: int,
    removal: bool,
    add_only: bool,
    task_plans: bool = True,
    card_ids: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The JSON schema of one call's answer, `{"edits": [...]}`, from AddEdit, UpdateEdit and DeleteEdit
    narrowed to this call, saying every rule of the validator a schema can:
    - each edit (`$defs`): the mode's ops and kinds (MODE_BUDGETS), this type's scopes (task scopes and
      plans only with `task_plans`, plans only at task scopes), an UPDATE or DELETE per entry of this
      type, and the cards shown (`card_ids`: the names the prompt gave them) as citations, the first
      `min_citations` distinct (`cites_schema`);
    - the list (`anyOf` of fixed sequences): each entry edited at most once, the UPDATEs and DELETEs
      first in the entries' order, then the ADDs, skills and plans before mistakes, at most as many of
      each kind as the mode allows; COMPRESS adds no more entries than it edits, and only beside them.
    What stays the validator's alone: near-duplicates, COMPRESS lowering the tokens, text that is only
    spaces, and (past MAX_SEQUENCES sequences) sets that edit many entries at once."""
    budget = MODE_BUDGETS[ReviewMode(mode)]
    card_ids = list(card_ids) if card_ids is not None else [c.id for c in cards]
    task_ids = {c.task_id for c in cards} if task_plans else set()
    scopes = sorted(type_scopes(task_type, task_ids))
    editable = [e.id for e in entries if e.scope in type_scopes(task_type, {c.task_id for c in cards})]
    compress_blocked = mode is ReviewMode.COMPRESS and not removal
    if min_citations > len(card_ids) or compress_blocked:  # only the empty set can be valid
        return _edits_object({"type": "array", "maxItems": 0}, {})
    cites = cites_schema(card_ids, min_citations)
    text = {"type": "string", "minLength": 1, "maxLength": TEXT_MAX_CHARS}

    def add(kind: str, scopes: Sequence[str]) -> dict[str, Any]:
        fields = {
            "op": enum(["ADD"]),
            "kind": enum([kind]),
            "scope": enum(scopes),
            "text": text,
            "cites": cites,
        }
        return record_schema(AddEdit, fields)

    defs: dict[str, dict[str, Any]] = {}
    task_scopes = [s for s in scopes if s.startswith("task:")]
    if budget.skills is None or budget.skills > 0:  # plans count as skills and belong to one task
        skill = [add("skill", scopes)] + ([add("plan", task_scopes)] if task_scopes else [])
        defs["skill"] = skill[0] if len(skill) == 1 else {"anyOf": skill}
    if budget.mistakes is None or budget.mistakes > 0:
        defs["mistake"] = add("mistake", scopes)
    targets = []
    if not add_only:
        for n, entry_id in enumerate(editable):
            target = {"entry_id": enum([entry_id]), "cites": cites}
            ops = []
            if budget.update:
                ops.append(record_schema(UpdateEdit, {"op": enum(["UPDATE"]), "text": text, **target}))
            if budget.delete and removal:
                ops.append(record_schema(DeleteEdit, {"op": enum(["DELETE"]), "reason": text, **target}))
            if ops:
                defs[f"entry{n + 1}"] = ops[0] if len(ops) == 1 else {"anyOf": ops}
                targets.append(f"entry{n + 1}")
    sequences = _sequences(mode, targets, budget, "skill" in defs, "mistake" in defs)
    edits = sequences[0] if len(sequences) == 1 else {"anyOf": sequences}
    return _edits_object(edits, defs)


def _sequences(mode: ReviewMode, targets: list[str], budget, skills: bool, mistakes: bool) -> list[dict]:
    """The edit lists a mode allows, each a fixed sequence of `$defs` names: the targets edited (a subset
    of `targets`, in order), then the ADDs. COMPRESS: any ADDs (skill or mistake) up to the number of
    entries edited, none without one."""
    ref = {name: {"$ref": f"#/$defs/{name}"} for name in (*targets, "skill", "mistake")}
    most_targets = len(targets)
    while True:
        subsets = [c for k in range(most_targets + 1) for c in combinations(targets, k)]
        if mode is ReviewMode.COMPRESS:
            adds = [{"anyOf": [ref[k] for k, on in (("skill", skills), ("mistake", mistakes)) if on]}]
            out = []
            for chosen in subsets:
                seq: dict[str, Any] = {"type": "array", "minItems": len(chosen), "maxItems": 2 * len(chosen)}
                if chosen:
                    seq["prefixItems"] = [ref[t] for t in chosen]
                    seq["items"] = adds[0] if skills or mistakes else False
                out.append(seq)
        else:
            out = []
            for chosen in subsets:
                for s in range((budget.skills or 0) + 1 if skills else 1):
                    for m in range((budget.mistakes or 0) + 1 if mistakes else 1):
                        items = [ref[t] for t in chosen] + [ref["skill"]] * s + [ref["mistake"]] * m
                        seq = {"type": "array", "minItems": len(items), "maxItems": len(items)}
                        if items:
                            seq["prefixItems"] = items
                        out.append(seq)
        if len(out) <= MAX_SEQUENCES or most_targets == 0:
            return out
        most_targets -= 1


def _edits_object(edits: dict[str, Any], defs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": {"edits": edits}, **_strict(["edits"])}
    if defs:
        schema["$defs"] = defs
    return schema


def _strict(required: list[str]) -> dict[str, Any]:
    return {"required": required, "additionalProperties": False}


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


class ReviseCall(NamedTuple):
    """What one reviser call sends: the program's inputs (prompt fields), the card names used in them,
    and the answer's JSON schema."""

    inputs: dict[str, str]
    aliases: CardAliases
    schema: dict[str, Any]


def revise_call(
    prompt: ReviserPrompt,
    assessment: Assessment,
    cards: Sequence[EvidenceCard],
    entries: Sequence[ScaffoldEntry],
    settings: ReviserSettings,
    feedback: Sequence[str] = (),
) -> ReviseCall:
    """The inputs, card names and schema of one call for `assessment`'s task type; the review passes
    every type's cards and this type's are the evidence shown."""
    mode = ReviewMode(assessment.mode)
    shown = [c for c in cards if c.task_type == assessment.task_type]
    aliases = CardAliases([c.id for c in shown])
    budget = prompt.budget(
        mode, min_citations=settings.min_citations, removal=settings.removal, add_only=settings.add_only
    )
    schema = edit_schema(
        mode,
        assessment.task_type,
        shown,
        entries,
        min_citations=settings.min_citations,
        removal=settings.removal,
        add_only=settings.add_only,
        task_plans=settings.task_plans,
        card_ids=aliases.names,
    )
    inputs = {
        "task_type": assessment.task_type,
        "mode": mode.value,
        "budget": budget,
        "review": render_assessment(assessment),
        "cards": render_cards(shown, aliases.names),
        "verdicts": aliases.in_text(render_verdicts(assessment.verdicts)),
        "entries": render_entries(entries),
        "feedback": render_feedback([aliases.in_text(line) for line in feedback]),
    }
    return ReviseCall(inputs, aliases, schema)


class ReviserSettings(NamedTuple):
    """The run's scaffold settings that shape a reviser's call (its budget text and schema) and that a
    compiled program was compiled under."""

    min_citations: int = 2
    removal: bool = True
    add_only: bool = False
    task_plans: bool = True


def reviser_probe(settings: ReviserSettings) -> Probe:
    """The structured-output probe of a reviser under `settings`: its edit schema for a REVISE review of
    two cards and one entry (every edit variant the run allows, citations by name), answered with the
    empty edit list, which every such schema accepts."""
    from pats.testing.cards import card_facts  # an empty group's facts: the probe's cards show nothing

    cards = [
        EvidenceCard(
            id=f"probe-{kind}",
            type=kind,
            step=0,
            task_id="probe-task",
            task_type="probe",
            scaffold_version="",
            text="probe",
            tokens=1,
            data=card_facts(kind),
        )
        for kind in ("outcome", "failure")
    ]
    entry = ScaffoldEntry(
        id="e1", kind="skill", scope="type:probe", text="probe", tokens=1, created_step=0, updated_step=0
    )
    schema = edit_schema(
        ReviewMode.REVISE,
        "probe",
        cards,
        [entry],
        min_citations=settings.min_citations,
        removal=settings.removal,
        add_only=settings.add_only,
        task_plans=settings.task_plans,
        card_ids=["C1", "C2"],
    )
    return Probe("pats_edits", schema, {"edits": []})


class LLMReviser:
    """Reviser protocol over any LiteLLM model, run as a DSPy program (`pats.reviser.program`); `faults`
    counts failed attempts by kind.

    `revise` asks once (the first answer, as the benchmark scores it). `refine` is what the review calls
    when the reviser was given the review's `check`: the program predicts, checks, and asks again with
    the problems, up to `attempts` answers, inside one program run."""

    def __init__(
        self,
        spec: LLMReviserSpec,
        *,
        min_citations: int = 2,
        removal: bool = True,
        add_only: bool = False,
        task_plans: bool = True,
        lm: Any = None,
        prompt: ReviserPrompt | None = None,
        check: Check | None = None,
    ):
        from pats.reviser.program import load_program

        self.prompt = prompt if prompt is not None else load_reviser_prompt()
        self.settings = ReviserSettings(min_citations, removal, add_only, task_plans)
        self.min_citations, self.removal, self.add_only = min_citations, removal, add_only
        # One program run may ask `attempts` times: its deadline covers them all.
        deadline = spec.attempts * (2 * spec.llm.timeout_s) + 1.0
        self.caller = LLMCaller(spec.llm, lm, deadline_s=deadline)
        self.caller.probe = reviser_probe(self.settings)
        self.program = load_program(spec, self.prompt, self.settings)
        self.check, self.attempts = check, spec.attempts

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
        refinement = await self._run(assessment, cards, entries, feedback, check=None, attempts=1)
        return list(refinement.edits)

    async def refine(
        self,
        step: int,
        assessment: Assessment,
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
    ) -> Refinement:
        """Up to `attempts` answers, each checked with the review's check, the next asked with the last
        one's problems; the last answer and each answer's problems."""
        assert self.check is not None, "refine needs the review's check (LLMReviser(check=...))"
        check = self.check

        def problems(edits: Sequence[Edit]) -> list[str]:
            return check(edits, assessment, entries, cards)

        return await self._run(assessment, cards, entries, (), check=problems, attempts=self.attempts)

    async def _run(self, assessment, cards, entries, feedback, *, check, attempts) -> Refinement:
        call = revise_call(self.prompt, assessment, cards, entries, self.settings, feedback)
        return await self.caller.call(
            self.program,
            parse=lambda prediction: prediction.refinement,
            schema=("pats_edits", call.schema),
            check=check,
            attempts=attempts,
            aliases=call.aliases,
            **call.inputs,
        )
