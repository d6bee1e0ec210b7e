"""Typed records that cross stage boundaries: rollouts -> cards -> judge -> reviser -> scaffold.

All frozen pydantic models, so every record can go to the JSONL event log as it is
(`record.model_dump(mode="json")`) and no stage can mutate another's data. An evidence card's facts
are one typed record per card type (`OutcomeData`, ..., `ExpertData`), told apart by their `type` tag. Token-level training data
(ids, masks, log-probs) is not here: a backend keeps it beside its rollouts, keyed by `Rollout.id`.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, RootModel, field_validator, model_validator

EntryKind = Literal["skill", "mistake", "plan"]
CardType = Literal["outcome", "contrast", "failure", "utility", "expert"]
VerdictLabel = Literal["helpful", "redundant", "harmful", "stale", "unscored"]


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Task(Record):
    """One training unit: a game, a product goal, a question."""

    id: str  # unique across splits, e.g. "twx:twc:train:17"
    type: str  # task type used for scopes and the judge, e.g. "twc", "pick_and_place_simple"
    split: str
    env: str  # environment kind
    payload: dict[str, Any] = Field(default_factory=dict)  # what the environment needs to start it


class Turn(Record):
    observation: str  # what the policy saw before acting
    action: str  # the action sent to the environment ("" if none could be parsed)
    output: str = ""  # the policy's raw text (generate mode) or the chosen action (score mode)
    valid: bool = True  # False: the environment rejected or could not parse the action
    invalid_reason: str = ""
    reward: float = 0.0
    prompt_tokens: int = 0
    response_tokens: int = 0


class Rollout(Record):
    id: str
    task_id: str
    scaffolded: bool  # False for probe rollouts run without the scaffold
    scaffold_version: str  # the version hash pinned for the group ("" for the empty view)
    turns: tuple[Turn, ...]
    reward: float  # episode return used by GRPO
    success: bool
    truncated: bool = False  # ran out of turns
    error: str = ""  # environment or backend fault that ended the episode

    @property
    def prompt_tokens(self) -> int:
        return sum(t.prompt_tokens for t in self.turns)

    @property
    def response_tokens(self) -> int:
        return sum(t.response_tokens for t in self.turns)


class RolloutGroup(Record):
    """G rollouts of one task under one pinned scaffold version (probes run with the empty view)."""

    step: int
    task: Task
    scaffold_version: str
    rollouts: tuple[Rollout, ...]

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.rollouts]

    @property
    def informative(self) -> bool:
        """Rewards not all equal, so GRPO gets a non-zero advantage from this group."""
        return len(set(self.rewards)) > 1

    @property
    def scaffolded(self) -> tuple[Rollout, ...]:
        return tuple(r for r in self.rollouts if r.scaffolded)

    @property
    def probes(self) -> tuple[Rollout, ...]:
        return tuple(r for r in self.rollouts if not r.scaffolded)


# Evidence card facts: what `pats.cards.build_cards` measures, one record per card type. Readers pick
# a card's facts by type (`isinstance(card.data, UtilityData)`) and read attributes.

FailureMode = Literal[
    "invalid_action", "repeated_action", "loop", "out_of_turns", "malformed_output", "env_error"
]
FAILURE_MODES: tuple[FailureMode, ...] = get_args(FailureMode)


class FailureEvent(Record):
    mode: FailureMode
    rollout_id: str
    turn: int  # index into Rollout.turns
    excerpt: str


class OutcomeData(Record):
    type: Literal["outcome"] = "outcome"
    n: int
    n_scaffolded: int
    n_probes: int
    successes: int
    success_rate: float  # over all rollouts, probes included
    reward_mean: float
    reward_std: float  # population std
    all_failed: bool
    all_passed: bool
    turns_mean: float
    prompt_tokens_mean: float
    response_tokens_mean: float
    # The actions of the shortest winning rollout (empty when none won): what the rules reviser builds
    # plans and family patterns from, so turning the contrast card off does not turn plans off.
    winning_actions: tuple[str, ...] = ()


class RolloutSummary(Record):
    rollout_id: str
    reward: float
    success: bool
    turns: int
    actions: tuple[str, ...]


class ContrastData(Record):
    type: Literal["contrast"] = "contrast"
    best: RolloutSummary
    worst: RolloutSummary
    diverge_turn: int | None  # first turn where the actions differ; None if identical
    best_action_at_diverge: str | None  # None where that rollout had already ended
    worst_action_at_diverge: str | None
    same_reward: bool


class FailureData(Record):
    type: Literal["failure"] = "failure"
    counts: dict[FailureMode, int]  # mode -> rollouts showing it, every mode in FAILURE_MODES order
    examples: tuple[FailureEvent, ...]  # at most one per mode
    failed_rollouts: int

    @field_validator("counts")
    @classmethod
    def _every_mode(cls, counts: dict[FailureMode, int]) -> dict[FailureMode, int]:
        # A mode left out was seen in no rollout, so readers can index any mode.
        return {mode: counts.get(mode, 0) for mode in FAILURE_MODES}


class UtilityData(Record):
    type: Literal["utility"] = "utility"
    n_with: int
    n_without: int
    success_with: float
    success_without: float
    reward_with: float
    reward_without: float
    delta: float  # success_with - success_without


class Departure(Record):
    rollout_id: str
    turn: int
    expected: str
    taken: str | None  # None where the rollout ended before that turn


class ExpertData(Record):
    type: Literal["expert"] = "expert"
    plan: tuple[str, ...]
    followed: dict[str, int]  # rollout id -> leading actions equal to the plan's prefix
    first_departure: Departure | None  # of the failed rollout that followed the plan furthest
    followed_fraction_mean: float


CardData = Annotated[
    OutcomeData | ContrastData | FailureData | UtilityData | ExpertData, Field(discriminator="type")
]


class EvidenceCard(Record):
    """A deterministic, size-bounded summary of one rollout group, cited by judges and edits."""

    id: str  # e.g. "c12-twx:twc:train:17-outcome"
    type: CardType
    step: int
    task_id: str
    task_type: str
    scaffold_version: str
    text: str  # rendered for LLMs, within the card token cap
    tokens: int
    data: CardData  # the same facts, typed, for rules and judges; never shrunk with the text
    privileged: bool = False  # built from expert plans: never shown to the policy

    @model_validator(mode="after")
    def _facts_match_type(self) -> EvidenceCard:
        if self.data.type != self.type:
            raise ValueError(
                f"card {self.id}: type {self.type!r} but data of type {self.data.type!r}; give it "
                f"{self.type!r} facts"
            )
        return self


class ReviewMode(str, Enum):
    EXPAND = "EXPAND"
    REVISE = "REVISE"
    COMPRESS = "COMPRESS"
    PRUNE = "PRUNE"


class Verdict(Record):
    entry_id: str
    label: VerdictLabel
    reason: str = ""
    cites: tuple[str, ...] = ()


class ScopeSuccess(Record):
    """A scope's success average at a review ("type:<t>" or "task:<id>") and whether the judge
    withdraws its entries (the average at or above judge.removal_threshold, after the warm-up)."""

    scope: str
    success: float
    withdraw: bool = False


class Assessment(Record):
    """The judge's view of one task type at one step."""

    task_type: str
    mode: ReviewMode
    ema_success: float
    pressure: float
    utility: float | None = None  # success with scaffold minus probes without, when probes ran
    verdicts: tuple[Verdict, ...] = ()
    reviews: int = 0  # reviews of this type so far, this one included (the warm-up counts them)
    removal_open: bool = True  # False during the judge's warm-up: no removal but PRUNE's
    scopes: tuple[ScopeSuccess, ...] = ()  # the type's and this step's tasks' success averages
    reason: str = ""  # why this mode and these withdrawals, for a reader of the event log


class AddEdit(Record):
    op: Literal["ADD"] = "ADD"
    kind: EntryKind
    scope: str  # "general" | "type:<task type>" | "task:<task id>"
    text: str
    cites: tuple[str, ...] = ()


class UpdateEdit(Record):
    op: Literal["UPDATE"] = "UPDATE"
    entry_id: str
    text: str
    cites: tuple[str, ...] = ()


class DeleteEdit(Record):
    op: Literal["DELETE"] = "DELETE"
    entry_id: str
    reason: str
    cites: tuple[str, ...] = ()


Edit = Annotated[AddEdit | UpdateEdit | DeleteEdit, Field(discriminator="op")]


class Attempt(Record):
    """One answer of a reviser that checks its own answers, and the problems the check found in it
    (none: accepted)."""

    edits: tuple[Edit, ...] = ()
    problems: tuple[str, ...] = ()


class Refinement(Record):
    """Every answer of one refining reviser's run for a task type, in order; the last is its answer."""

    attempts: tuple[Attempt, ...] = Field(min_length=1)

    @property
    def edits(self) -> tuple[Edit, ...]:
        return self.attempts[-1].edits

    @property
    def accepted(self) -> bool:
        return not self.attempts[-1].problems


class ScaffoldEntry(Record):
    id: str
    kind: EntryKind
    scope: str
    text: str
    tokens: int  # counted with the policy's tokenizer
    created_step: int
    updated_step: int
    cites: tuple[str, ...] = ()


class ScaffoldVersion(Record):
    number: int
    hash: str  # content hash of the entries
    step: int
    parent: str | None
    entries: tuple[ScaffoldEntry, ...]


class ScaffoldView(Record):
    """What one rollout group sees: the rendered guidance and the version it came from."""

    version: str  # version hash; "" for the empty (deployment) view
    text: str  # "" renders a prompt byte-identical to the plain one
    entry_ids: tuple[str, ...] = ()
    tokens: int = 0
    cut_steps: int = 0  # plan steps left out to fit the view's token budget (the cut is said in the text)

    @property
    def empty(self) -> bool:
        return not self.text


EMPTY_VIEW = ScaffoldView(version="", text="")


class LLMUsage(Record):
    """A judge's or reviser's LLM work so far (all zeros for the statistics judge and the rules reviser)."""

    calls: int = 0  # every request sent: answered, malformed or failed (faults are among them)
    seconds: float = 0.0  # their summed latency, failed ones included
    tokens: int = 0  # prompt + completion tokens the server reported, malformed answers included
    prompt_tokens: int = 0  # of the tokens, those of the prompts
    completion_tokens: int = 0  # ... and those of the answers
    faults: int = 0  # failed attempts (each retried or given up)
    malformed: int = 0  # of the faults, answers that arrived but could not be parsed or used
    timeouts: int = 0  # of the faults, requests not answered within llm.timeout_s (a slow or loaded server)
    over_budget: int = 0  # times its work was cut off by the step's review budget

    def __add__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(**{k: getattr(self, k) + getattr(other, k) for k in LLMUsage.model_fields})

    def __sub__(self, other: LLMUsage) -> LLMUsage:
        return LLMUsage(**{k: getattr(self, k) - getattr(other, k) for k in LLMUsage.model_fields})


class ReviewResult(Record):
    """Everything one review produced, for the event log and the store."""

    step: int
    cards: tuple[EvidenceCard, ...]
    assessments: tuple[Assessment, ...]
    edits: tuple[Edit, ...]  # the accepted edit set (may be empty)
    refused: tuple[str, ...] = ()  # validation errors of refused edit sets
    fallback: bool = False  # the LLM reviser failed and the rules reviser answered
    fallback_streak: int = 0  # steps in a row, this one included, where rules answered every task type
    llm_faults: int = 0
    llm_calls: int = 0  # judge and reviser LLM requests of this review: answered, malformed or failed
    llm_seconds: float = 0.0  # their summed latency
    llm_tokens: int = 0  # prompt + completion tokens the server reported, malformed answers included
    llm_malformed: int = 0  # answers that arrived but could not be used (counted in llm_faults too)
    llm_timeouts: int = 0  # requests not answered within llm.timeout_s (counted in llm_faults too)
    over_budget: int = 0  # judge or reviser calls cut off by the step's review budget
    seconds: float = 0.0


class JudgeState(RootModel[dict[str, Any]]):
    """The judge's state between steps (its success averages), as its `state_dict()` gives it; the
    judge checks the content when it loads it. A root model, so its JSON is the judge's own dict."""

    model_config = ConfigDict(frozen=True)


class ScaffoldState(Record):
    """The scaffold side of a finished step, what a resume restores beside the policy's weights: the
    store's version at the step's end and the judge's state (see pats.step_end)."""

    step: int  # the last finished step
    scaffold_version: int = 0  # versions after it belong to steps the resumed run redoes
    judge: JudgeState = JudgeState({})


class UpdateStats(Record):
    """One policy update, as a backend reports it (the local one: pats.backends.local.training); each
    field goes to the step's metrics as `policy/<field>`. Losses and ratios are averages over epochs."""

    loss: float = 0.0
    clip_frac: float = 0.0
    approx_kl: float = 0.0  # old vs new policy
    ratio_mean: float = 0.0
    kl: float = 0.0  # to the reference
    grad_norm: float = 0.0  # before clipping
    tokens: float = 0.0  # trained per epoch
    items: float = 0.0
    steps: float = 0.0  # optimizer steps taken
    skipped: float = 0.0  # 1 when no step was taken
    no_signal: float = 0.0  # 1 when every advantage was zero
    nonfinite: float = 0.0  # epochs dropped for a NaN/inf loss or gradient

    @property
    def dropped_for_nonfinite(self) -> bool:
        """No step was taken because every epoch had a NaN/inf loss or gradient."""
        return self.nonfinite > 0 and self.steps == 0

    def metrics(self) -> dict[str, float]:
        return {f"policy/{k}": v for k, v in self.model_dump().items()}
