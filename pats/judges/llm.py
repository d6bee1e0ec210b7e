"""The LLM judge: the statistics judge's modes, plus a verdict on every entry from an LLM and a rubric.

Per task type, one DSPy call grades every scaffold entry that type's prompts can see against that
type's evidence cards, with the instructions, label descriptions and examples of a rubric file
(`judges/<environment kind>.yaml`, or the spec's `judge.rubric`). Each verdict is a label, a reason
and the ids of the cards it rests on.

Structured output (`llm.structured`, see pats.lm.probe): the answer's JSON schema (`verdict_schema`) is the
Verdict record narrowed to the call: one verdict per entry shown, entry ids and the four labels as
enums, and at least one citation from the ids of the cards shown. The checks below still apply to
whatever arrives.

Never guessed: a label outside the rubric's four, a citation of a card that is not this type's, no
citation at all, two different grades for one entry, or no grade for an entry each give
`Verdict(label="unscored", reason=<why>)`. An unparseable answer is retried (LLMCaller counts it as
`malformed`); when retries run out, or on any other LLM fault, every verdict of that type is unscored
and the judge goes on: `assess` never raises for LLM faults.

Where it departs from the published method: the paper's judge picks modes and grades in one LLM step;
here the modes always come from the statistics judge (reproducible, and unchanged when the LLM fails)
and the LLM only grades.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from pats.errors import JudgeError
from pats.lm.caller import LLMCaller
from pats.lm.probe import Probe
from pats.lm.prompts import (
    prompt_file,
    read_prompt_file,
    render_assessment,
    render_cards,
    render_entries,
)
from pats.lm.schema import cites_schema, enum, record_schema
from pats.protocols import Judge
from pats.scaffold.validate import type_entries
from pats.spec.models import LLMJudgeSpec, ScaffoldBudget
from pats.types import Assessment, EvidenceCard, LLMUsage, RolloutGroup, ScaffoldEntry, Verdict

GradeLabel = Literal["helpful", "redundant", "harmful", "stale"]
GRADE_LABELS: tuple[GradeLabel, ...] = get_args(GradeLabel)


class RubricExample(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    entry: str
    evidence: str
    label: GradeLabel
    reason: str


class Rubric(BaseModel):
    """A judge rubric file: what to look for, what each label means, worked examples."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    environment: str
    instructions: str = Field(min_length=1)
    labels: dict[GradeLabel, str]
    examples: tuple[RubricExample, ...] = ()

    @model_validator(mode="after")
    def _every_label(self):
        missing = [label for label in GRADE_LABELS if not self.labels.get(label, "").strip()]
        if missing:
            raise ValueError(f"labels: describe every label; missing {', '.join(missing)}")
        return self

    def render(self) -> str:
        """The signature instructions: rubric text, label meanings, examples."""
        labels = [f"- {label}: {self.labels[label].strip()}" for label in GRADE_LABELS]
        parts = [
            self.instructions.strip(),
            "Labels (write exactly one of these words):\n" + "\n".join(labels),
        ]
        for n, ex in enumerate(self.examples, 1):
            parts.append(
                f"Example {n}:\nEntry: {ex.entry}\nEvidence: {ex.evidence}\n"
                f"Verdict: label {ex.label}; reason: {ex.reason}"
            )
        return "\n\n".join(parts)


def load_rubric(path: str | None, environment: str) -> Rubric:
    """The rubric at `path`, or pats' own `judges/<environment>.yaml` when path is None."""
    return read_prompt_file(prompt_file(path, f"{environment}.yaml"), Rubric)


def grade_program(rubric: Rubric):
    """A dspy.Predict whose signature carries the rubric as its instructions (built lazily: dspy is slow
    to import)."""
    import dspy

    class GradeEntries(dspy.Signature):
        task_type: str = dspy.InputField(desc="the task type whose rollouts the cards summarize")
        review: str = dspy.InputField(desc="the statistics of this task type")
        cards: str = dspy.InputField(desc="evidence cards, each headed by its [card id]")
        entries: str = dspy.InputField(desc="scaffold entries to grade, each headed by its [entry id]")
        verdicts: list[dict[str, Any]] = dspy.OutputField(
            desc='one object per entry: {"entry_id": "<entry id>", "label": "'
            + '" | "'.join(GRADE_LABELS)
            + '", "reason": "<one sentence naming the evidence>", "cites": ["<card id>", ...]}'
        )

    return dspy.Predict(GradeEntries.with_instructions(rubric.render()))


def verdict_schema(entry_ids: Sequence[str], card_ids: Sequence[str]) -> dict[str, Any]:
    """The JSON schema of one grading call's answer, `{"verdicts": [...]}`: the Verdict record with the
    entry ids shown, the rubric's labels and the card ids shown as enums, one verdict per entry."""
    verdict = record_schema(
        Verdict,
        {"entry_id": enum(entry_ids), "label": enum(GRADE_LABELS), "cites": cites_schema(card_ids, 1)},
    )
    verdicts = {"type": "array", "items": verdict, "minItems": len(entry_ids), "maxItems": len(entry_ids)}
    return {
        "type": "object",
        "properties": {"verdicts": verdicts},
        "required": ["verdicts"],
        "additionalProperties": False,
    }


def judge_probe() -> Probe:
    """The structured-output probe of the judge: its verdict schema for one entry and two cards, and an
    answer that schema accepts."""
    verdict = {"entry_id": "e1", "label": GRADE_LABELS[0], "reason": "probe", "cites": ["C1"]}
    return Probe("pats_verdicts", verdict_schema(["e1"], ["C1", "C2"]), {"verdicts": [verdict]})


def verdicts_from_answer(
    answer: Sequence[Any], entry_ids: Sequence[str], card_ids: set[str]
) -> tuple[Verdict, ...]:
    """One verdict per entry id, in order; anything not clearly valid is unscored, never guessed."""
    found: dict[str, list[Verdict]] = {}
    for item in answer:
        if not isinstance(item, dict) or item.get("entry_id") not in entry_ids:
            continue  # grades of entries that were not asked about carry nothing
        found.setdefault(item["entry_id"], []).append(_verdict(item, card_ids))
    out = []
    for entry_id in entry_ids:
        grades = found.get(entry_id, [])
        if not grades:
            out.append(Verdict(entry_id=entry_id, label="unscored", reason="the judge gave no grade"))
        elif len({(g.label, g.cites) for g in grades}) > 1:
            labels = ", ".join(g.label for g in grades)
            out.append(Verdict(entry_id=entry_id, label="unscored", reason=f"graded twice: {labels}"))
        else:
            out.append(grades[0])
    return tuple(out)


def _verdict(item: dict[str, Any], card_ids: set[str]) -> Verdict:
    entry_id = item["entry_id"]
    label, reason, cites = item.get("label"), item.get("reason", ""), item.get("cites", [])

    def unscored(why: str) -> Verdict:
        return Verdict(entry_id=entry_id, label="unscored", reason=why)

    if not isinstance(label, str) or label.strip().lower() not in GRADE_LABELS:
        return unscored(f"label {label!r} is not one of {', '.join(GRADE_LABELS)}")
    if not isinstance(cites, list) or not all(isinstance(c, str) for c in cites):
        return unscored(f"cites {cites!r} is not a list of card ids")
    if not cites:
        return unscored(f"label {label.strip().lower()} cites no card")
    unknown = sorted(set(cites) - card_ids)
    if unknown:
        return unscored(f"cites unknown card(s) {', '.join(unknown)}")
    return Verdict(
        entry_id=entry_id,
        label=label.strip().lower(),
        reason=str(reason).strip(),
        cites=tuple(dict.fromkeys(cites)),
    )


class LLMJudge:
    """Judge protocol: StatsJudge's assessments with LLM verdicts filled in.

    `faults` counts failed LLM attempts by kind; state (the success averages) is the StatsJudge's.
    """

    def __init__(
        self,
        spec: LLMJudgeSpec,
        budget: ScaffoldBudget,
        environment: str,
        *,
        lm: Any = None,
        stats: Judge | None = None,
        rubric: Rubric | None = None,
        budget_s: float | None = None,
    ):
        if stats is None:
            from pats.judges.stats import StatsJudge

            stats = StatsJudge(spec, budget)
        self.stats = stats
        self.rubric = rubric if rubric is not None else load_rubric(spec.rubric, environment)
        self.caller = LLMCaller(spec.llm, lm)
        self.caller.probe = judge_probe()
        self.program = grade_program(self.rubric)
        self.budget_s = budget_s  # seconds per step for all grading calls (None: no limit)
        self.over_budget = 0  # steps whose grading was cut off by the budget

    @property
    def faults(self):
        return self.caller.faults

    def usage(self) -> LLMUsage:
        return self.caller.usage() + LLMUsage(over_budget=self.over_budget)

    async def assess(
        self,
        step: int,
        groups: Sequence[RolloutGroup],
        cards: Sequence[EvidenceCard],
        entries: Sequence[ScaffoldEntry],
    ) -> list[Assessment]:
        assessments = await self.stats.assess(step, groups, cards, entries)
        task_ids: dict[str, set[str]] = {}
        for group in groups:
            task_ids.setdefault(group.task.type, set()).add(group.task.id)
        for card in cards:
            task_ids.setdefault(card.task_type, set()).add(card.task_id)
        graded = []
        for assessment in assessments:
            t = assessment.task_type
            type_cards = [c for c in cards if c.task_type == t]
            graded.append(self._grade(assessment, type_cards, type_entries(entries, t, task_ids.get(t, ()))))
        try:
            return list(await asyncio.wait_for(asyncio.gather(*graded), self.budget_s))
        except asyncio.TimeoutError:  # past the step's budget: the modes stand, the grades are left out
            self.over_budget += 1
            return assessments

    async def _grade(
        self, assessment: Assessment, cards: Sequence[EvidenceCard], entries: Sequence[ScaffoldEntry]
    ) -> Assessment:
        if not entries:
            return assessment
        entry_ids = [e.id for e in entries]
        try:
            prediction = await self.caller.call(
                self.program,
                schema=("pats_verdicts", verdict_schema(entry_ids, [c.id for c in cards])),
                task_type=assessment.task_type,
                review=render_assessment(assessment),
                cards=render_cards(cards),
                entries=render_entries(entries),
            )
            verdicts = verdicts_from_answer(prediction.verdicts, entry_ids, {c.id for c in cards})
        except JudgeError as err:  # faults are counted by the caller; the review goes on without grades
            why = f"LLM judge failed: {err}"
            verdicts = tuple(Verdict(entry_id=i, label="unscored", reason=why) for i in entry_ids)
        return assessment.model_copy(update={"verdicts": verdicts})

    def state_dict(self) -> dict[str, Any]:
        return self.stats.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stats.load_state_dict(state)
