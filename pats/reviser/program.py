"""The LLM reviser as a DSPy program: predict the edits, check them, ask again with the problems.

`ReviseProgram` is a `dspy.Module`. Its `forward` predicts a typed edit list (`list[Edit]`) from the
rendered review (`pats.reviser.llm.revise_call`), maps the card names back to ids, checks the set with
the check it is given (in training the review's own `pats.review.check_edits`), and, while the set is
refused and answers are left, predicts again with the validator's problems as `feedback`, the way
`dspy.Refine` retries with feedback. It returns every answer with its problems (`Refinement`). A first
answer that cannot be parsed raises (the caller counts it as malformed and retries the run); a later
one ends the run as a refused answer.

Compiling (`pats compile-reviser`, pats.reviser.compile): demos are the rules reviser's valid edits on
a train split of recorded bundles (`LabeledFewShot`), or traces that `BootstrapFewShot` kept because
`edit_metric` scored them 1.0 (accepted, with the kinds of edit the rules reviser wrote on that review);
`edit_metric` also gives the validator's problems as feedback, the form `dspy.GEPA` reads. A `match`
program keeps every labeled demo and shows a review only the one of its task type and mode
(`demo_for`). A compiled program is saved with what it was compiled under (`ProgramMeta`: the model, the scaffold settings that shape the schema, the prompt's digest, the signature's fields), and a
spec loads it with `reviser.program`; a program compiled under other settings is refused with which one
differs, since its demos would teach answers the schema or the validator refuses.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pats.errors import PrerequisiteError, SpecError
from pats.scaffold.problems import valid_indices
from pats.types import Attempt, Edit, Record, Refinement

if TYPE_CHECKING:
    from pats.reviser.prompt import CardAliases, ReviserPrompt, ReviserSettings
    from pats.spec.models import LLMReviserSpec

FORMAT = "pats-reviser-program/1"
INPUT_FIELDS = ("task_type", "mode", "budget", "review", "cards", "verdicts", "entries", "feedback")


class Candidate(Record):
    """One demo set the `select` optimizer scored on the train bundles (pats.reviser.compile)."""

    demo: str  # the train bundle whose rules answer was the demo; "" for no demo
    score: float  # mean `edit_metric` of the first answers on the train bundles other than the demo's
    scored: int  # how many bundles that mean is over


class ProgramMeta(Record):
    """What a compiled program was compiled under; a spec that differs is refused (`check_meta`)."""

    format: str = FORMAT
    model: str
    min_citations: int
    removal: bool
    add_only: bool
    task_plans: bool
    prompt_sha: str  # of judges/reviser.yaml's texts as the signature carries them
    fields: tuple[str, ...]  # the signature's input fields, then its output
    optimizer: str
    demos: int
    trainset: tuple[str, ...]  # the bundles compiled against
    selection: tuple[Candidate, ...] = ()  # `select`: every candidate's score, the kept one first


def signature(prompt: ReviserPrompt) -> Any:
    """The reviser's DSPy signature: the rendered review in, a typed edit list out."""
    import dspy

    class ReviseScaffold(dspy.Signature):
        task_type: str = dspy.InputField(desc="the task type under review")
        mode: str = dspy.InputField(desc="the review mode")
        budget: str = dspy.InputField(desc="what edits this mode allows; keep to it")
        review: str = dspy.InputField(desc="the statistics of this task type")
        cards: str = dspy.InputField(desc="evidence cards, each headed by its [card name]")
        verdicts: str = dspy.InputField(desc="the judge's verdicts on the current entries")
        entries: str = dspy.InputField(desc="current scaffold entries, each headed by its [entry id]")
        feedback: str = dspy.InputField(desc="problems of your previous answer to fix, if any")
        # Typed as list[Edit] by the program (edits_from_answer), not here: DSPy would write the union's
        # JSON schema (~500 tokens) into every prompt, where a small model's context is short and the
        # schema goes out as response_format anyway.
        edits: list[dict[str, Any]] = dspy.OutputField(desc=prompt.edit_format.strip())

    return ReviseScaffold.with_instructions(prompt.instructions.strip())


def prompt_digest(prompt: ReviserPrompt) -> str:
    return hashlib.sha256(prompt.model_dump_json().encode()).hexdigest()[:16]


def _module_class() -> type:
    import dspy

    class ReviseProgram(dspy.Module):
        """predict -> check -> predict with the problems, up to `attempts` answers."""

        def __init__(self, prompt: ReviserPrompt):
            super().__init__()
            self.prompt = prompt
            self.revise = dspy.Predict(signature(prompt))
            # `match` programs (pats compile-reviser --optimizer match) keep every labeled demo and show
            # each review only the one that fits it (`demo_for`); others show all their demos.
            self.match_demos = False

        def demo_for(self, inputs: dict[str, Any]) -> list[Any]:
            """The first demo of the review's task type and mode, else the first of its mode, else none
            (demos are in the labeled rank: answers that add guidance first, then the shortest)."""
            demos = list(self.revise.demos)
            for fits in (
                lambda d: d["task_type"] == inputs["task_type"] and d["mode"] == inputs["mode"],
                lambda d: d["mode"] == inputs["mode"],
            ):
                found = [d for d in demos if fits(d)]
                if found:
                    return found[:1]
            return []

        def forward(
            self,
            *,
            aliases: CardAliases,
            check: Callable[[Sequence[Edit]], list[str]] | None = None,
            attempts: int = 1,
            **inputs: Any,
        ) -> dspy.Prediction:
            from dspy.utils.exceptions import AdapterParseError

            from pats.lm.faults import MalformedAnswer
            from pats.reviser.prompt import edits_from_answer, render_feedback

            shown = {"demos": self.demo_for(inputs)} if self.match_demos else {}
            tries: list[Attempt] = []
            for n in range(attempts):
                try:
                    edits = tuple(aliases.to_ids(edits_from_answer(self.revise(**inputs, **shown).edits)))
                except (AdapterParseError, MalformedAnswer) as err:
                    if n == 0:
                        raise  # no edit list at all: the caller counts it as malformed and retries
                    tries.append(Attempt(problems=(f"the answer was not an edit list: {str(err)[:200]}",)))
                    break
                problems = tuple(check(edits)) if check is not None else ()
                tries.append(Attempt(edits=edits, problems=problems))
                if not problems:
                    break
                inputs = {**inputs, "feedback": render_feedback([aliases.in_text(p) for p in problems])}
            refinement = Refinement(attempts=tuple(tries))
            return dspy.Prediction(edits=list(refinement.edits), refinement=refinement)

    return ReviseProgram


def new_program(prompt: ReviserPrompt) -> Any:
    """An uncompiled program (no demos)."""
    return _module_class()(prompt)


def meta_of(
    model: str,
    prompt: ReviserPrompt,
    settings: ReviserSettings,
    optimizer: str,
    demos: int,
    trainset,
    selection: Sequence[Candidate] = (),
) -> ProgramMeta:
    return ProgramMeta(
        model=model,
        min_citations=settings.min_citations,
        removal=settings.removal,
        add_only=settings.add_only,
        task_plans=settings.task_plans,
        prompt_sha=prompt_digest(prompt),
        fields=(*INPUT_FIELDS, "edits"),
        optimizer=optimizer,
        demos=demos,
        trainset=tuple(trainset),
        selection=tuple(selection),
    )


def save_program(program: Any, meta: ProgramMeta, path: Path) -> Path:
    """The program's state (demos, instructions) and what it was compiled under, as one JSON file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    state = program.dump_state(json_mode=True)
    text = json.dumps({"meta": meta.model_dump(mode="json"), "state": state}, indent=1, ensure_ascii=False)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def check_meta(meta: ProgramMeta, model: str, prompt: ReviserPrompt, settings: ReviserSettings) -> list[str]:
    """Why a program compiled under `meta` does not fit this spec (empty: it fits)."""
    why = []
    if meta.model != model:
        why.append(f"it was compiled for reviser.llm.model {meta.model}, this spec asks {model}")
    for key, spec_key in (
        ("min_citations", "scaffold.min_citations"),
        ("removal", "the scaffold's removal (scaffold.mode pats with removal on)"),
        ("add_only", "scaffold.mode grow (add only)"),
        ("task_plans", "scaffold.task_plans"),
    ):
        compiled, here = getattr(meta, key), getattr(settings, key)
        if compiled != here:
            why.append(f"{spec_key} was {compiled} when it was compiled, this spec has {here}")
    if meta.prompt_sha != prompt_digest(prompt):
        why.append("the reviser prompt (judges/reviser.yaml) changed since it was compiled")
    if tuple(meta.fields) != (*INPUT_FIELDS, "edits"):
        why.append(f"its signature has fields {list(meta.fields)}, this pats's {[*INPUT_FIELDS, 'edits']}")
    return why


def load_program(spec: LLMReviserSpec, prompt: ReviserPrompt, settings: ReviserSettings) -> Any:
    """The spec's compiled program (`reviser.program`), checked against the spec; else a new one."""
    program = new_program(prompt)
    if spec.program is None:
        return program
    path = Path(spec.program)
    if not path.is_file():
        raise PrerequisiteError(
            f"reviser.program: {path} not found; compile one with `pats compile-reviser SPEC --bundles DIR "
            "--out PATH`, or leave reviser.program out to run the uncompiled program"
        )
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
        meta = ProgramMeta.model_validate(saved["meta"])
        state = saved["state"]
    except (ValueError, KeyError, TypeError) as err:
        raise SpecError(
            f"reviser.program: {path} is not a program saved by `pats compile-reviser` ({FORMAT}): "
            f"{str(err)[:200]}; compile it again"
        ) from None
    why = check_meta(meta, spec.llm.model, prompt, settings)
    if why:
        raise SpecError(
            f"reviser.program: {path} does not fit this spec: {'; '.join(why)}. Compile it for this spec "
            "(`pats compile-reviser SPEC --bundles DIR --out PATH`), or leave reviser.program out"
        )
    program.load_state(state)
    program.match_demos = meta.optimizer == "match"
    return program


# -- scoring -------------------------------------------------------------------------------------------


def kinds_as_reference(edits: Sequence[Edit], reference: Sequence[Edit]) -> float:
    """How far the set's edit kinds (ADD/UPDATE/DELETE, counted) are the reference's: the kinds both
    have, over the larger count; 1.0 when both are empty. The rules reviser's answer is the reference:
    what it does per review mode is what its evidence calls for, while a small model that copies a
    DELETE demo into REVISE reviews of an unsolved type keeps the validator's rules and does not."""
    if not edits and not reference:
        return 1.0
    ours, theirs = [e.op for e in edits], [e.op for e in reference]
    shared = sum(min(ours.count(op), theirs.count(op)) for op in set(ours))
    return shared / max(len(ours), len(theirs))


def attempt_score(attempt: Attempt, reference: Sequence[Edit]) -> float:
    """A set the check accepts scores 0.5 plus half its kinds' agreement with the reference answer
    (the rules reviser's: `kinds_as_reference`), 1.0 for an empty set where the reference is empty too
    and 0.0 for an empty set where it has edits; a refused set scores half its fraction of valid edits
    (the review applies none of it), so any accepted set with edits outranks any refused one."""
    if not attempt.problems:
        if not attempt.edits:
            return 0.0 if reference else 1.0
        return 0.5 + 0.5 * kinds_as_reference(attempt.edits, reference)
    if not attempt.edits:
        return 0.0
    return 0.5 * len(valid_indices(attempt.edits, attempt.problems)) / len(attempt.edits)


def edit_metric(example: Any, prediction: Any, trace: Any = None, pred_name=None, pred_trace=None) -> Any:
    """The first answer's score (`attempt_score`) with what lowered it as feedback: a
    `dspy.Prediction(score, feedback)`, which compares as its score (BootstrapFewShot's threshold) and
    is what `dspy.GEPA` reads. `example.reference` is the rules reviser's edit list."""
    import dspy

    first = prediction.refinement.attempts[0]
    reference = list(example.reference)
    score = attempt_score(first, reference)
    if first.problems:
        feedback = "The edit set was refused:\n" + "\n".join(f"- {p}" for p in first.problems)
    elif not first.edits and reference:
        feedback = "No edits, where the evidence supported some (the rules reviser wrote some)."
    elif score < 1.0:
        feedback = (
            f"The edit set was accepted, but its edits ({kinds(first.edits)}) are not the kinds the evidence "
            f"called for here (the rules reviser wrote {kinds(reference)})."
        )
    else:
        feedback = "The edit set was accepted."
    return dspy.Prediction(score=score, feedback=feedback)


def kinds(edits: Sequence[Edit]) -> str:
    return ", ".join(e.op for e in edits) or "none"
