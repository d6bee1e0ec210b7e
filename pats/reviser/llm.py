"""The LLM reviser: a DSPy program (pats.reviser.program) that turns one task type's review into typed
scaffold edits.

Inputs (`revise_call`): the review mode and the text of its budget, the type's statistics, its evidence
cards under short names (C1..Cn: privileged ones only if the caller passed them), the judge's verdicts,
the current entries, and `feedback` (the problems of a refused answer). Output: a JSON list of ADD /
UPDATE / DELETE edits, read into `pats.types` records with the card names mapped back to ids. The
instructions, the edit format and the budget texts are data: `judges/reviser.yaml`.

Structured output (`llm.structured`, see pats.lm.probe): the answer's JSON schema is built per call
(`edit_schema`) and says every rule of the validator a schema can: the ops, kinds, scopes and entries
this call allows, citations of the cards shown with the first `min_citations` distinct, each entry
edited once, the mode's ADD counts. The `auto` probe sends the reviser's own schema (`reviser_probe`).

Checking: `refine` (what the review calls when the reviser was built with the review's `check`) runs
the program, which checks each answer and asks again with the problems, up to `reviser.attempts`
answers; the review logs each refused answer and falls back to the rules reviser when the last is
refused too. `revise` asks once (the first answer, as the benchmark scores it). An answer that is not
an edit list is counted as `malformed` and the run retried; when retries run out, JudgeError.

Where it departs from the published method: the mode's budget is stated to the LLM in words and
enforced by the schema where a schema can and by the validator everywhere, instead of trusting the LLM
to keep it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from itertools import combinations
from typing import Any, NamedTuple

from pats.lm.caller import LLMCaller
from pats.lm.probe import Probe
from pats.lm.prompts import render_assessment, render_cards, render_entries
from pats.lm.schema import cites_schema, enum, record_schema
from pats.reviser.prompt import (
    CardAliases,
    ReviserPrompt,
    ReviserSettings,
    load_reviser_prompt,
    render_feedback,
    render_verdicts,
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
)

# The review's check of one type's edit set: (edits, assessment, entries, cards) -> problems (none: valid).
Check = Callable[[Sequence[Edit], Assessment, Sequence[ScaffoldEntry], Sequence[EvidenceCard]], list[str]]
# The schema's bound on an edit's text or reason: the prompt asks for at most two sentences, and a small
# model under a schema otherwise writes until max_tokens and never reaches its citations.
TEXT_MAX_CHARS = 300


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
    task_ids: Collection[str] | None = None,
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
    shown_tasks = set(task_ids) if task_ids is not None else {c.task_id for c in cards}
    scopes = sorted(type_scopes(task_type, shown_tasks if task_plans else ()))
    editable = [e.id for e in entries if e.scope in type_scopes(task_type, shown_tasks)]
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


def reviser_probe(settings: ReviserSettings) -> Probe:
    """The structured-output probe of a reviser under `settings`: its edit schema for a REVISE review of
    two cards of one task and one entry (every edit variant the run allows, citations by name),
    answered with the empty edit list, which every such schema accepts."""
    entry = ScaffoldEntry(
        id="e1", kind="skill", scope="type:probe", text="probe", tokens=1, created_step=0, updated_step=0
    )
    schema = edit_schema(
        ReviewMode.REVISE,
        "probe",
        (),
        [entry],
        min_citations=settings.min_citations,
        removal=settings.removal,
        add_only=settings.add_only,
        task_plans=settings.task_plans,
        card_ids=["C1", "C2"],
        task_ids={"probe-task"},
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
        settings: ReviserSettings | None = None,
        *,
        lm: Any = None,
        prompt: ReviserPrompt | None = None,
        check: Check | None = None,
    ):
        from pats.reviser.program import load_program

        self.prompt = prompt if prompt is not None else load_reviser_prompt()
        # The run's scaffold settings (`ReviserSettings.of(spec.scaffold)`); the defaults' otherwise.
        self.settings = settings if settings is not None else ReviserSettings()
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
