"""Evidence cards: deterministic, size-bounded summaries of one rollout group (DESIGN.md "Evidence card").

`build_cards` turns a `RolloutGroup` into one `EvidenceCard` per requested type that applies, in the
order of `types`: `outcome` (always), `contrast` (2+ rollouts), `failure` (always), `utility` (only
with both scaffolded and probe rollouts) and `expert` (only with an expert plan; marked privileged).
Each card carries the facts twice: `data`, the card type's typed record (`OutcomeData`, ...,
`ExpertData` in pats.types; read by the rules reviser and judges), and `text`, a compact rendering for
LLMs within `max_tokens` tokens of the policy tokenizer. `data` is never shrunk; the text is shrunk in
fixed steps (`LEVELS`: fewer listed actions and examples, shorter actions and excerpts, cut by token
count) and, as a last resort, cut at the cap, so `tokens <= max_tokens` always holds.

Where this departs from the published method:
- `contrast`: when the best and the worst are the same rollout (every reward and turn count tie),
  the worst is taken from the other rollouts, so a card never contrasts a rollout with itself.
- actions are compared after normalization (`normalize_action`) in `contrast` and `expert`.
- an empty expert plan counts as no plan: no `expert` card.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean, pstdev
from typing import get_args

from pats.cards.failures import FAILURE_MODES, FailureEvent, detect_failures, normalize_action
from pats.protocols import TokenCounter
from pats.types import (
    CardData,
    CardType,
    ContrastData,
    Departure,
    EvidenceCard,
    ExpertData,
    FailureData,
    OutcomeData,
    Record,
    Rollout,
    RolloutGroup,
    RolloutSummary,
    UtilityData,
)

KNOWN_CARDS: tuple[CardType, ...] = get_args(CardType)
ELLIPSIS = "..."


@dataclass(frozen=True)
class Detail:
    """How much of a card's lists the text shows."""

    items: int | None  # actions or examples listed per list (None: all)
    tokens: int | None  # cap on one action or excerpt (None: whole)


LEVELS = (
    Detail(None, None),
    Detail(16, 32),
    Detail(8, 16),
    Detail(4, 10),
    Detail(2, 6),
    Detail(0, 6),  # lists go first; the divergence and the departure keep their actions a while longer
    Detail(0, 3),
    Detail(0, 0),
)


def build_cards(
    group: RolloutGroup,
    types: Sequence[CardType],
    count_tokens: TokenCounter,
    max_tokens: int,
    expert_plan: Sequence[str] | None = None,
) -> list[EvidenceCard]:
    unknown = [t for t in types if t not in KNOWN_CARDS]
    if unknown:
        raise ValueError(
            f"unknown card type(s) {', '.join(map(repr, unknown))}; known: {', '.join(KNOWN_CARDS)}"
        )
    repeated = sorted({t for t in types if list(types).count(t) > 1})
    if repeated:
        raise ValueError(f"card type(s) listed twice: {', '.join(repeated)}; list each once")
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")

    cards = []
    for card_type in types:
        facts = _facts(card_type, group, expert_plan)
        if facts is None:
            continue
        card_id = f"c{group.step}-{group.task.id}-{card_type}"
        # The id already names the step and the type.
        header = f"[{card_id}] task {group.task.id} ({group.task.type}) | scaffold {group.scaffold_version or 'none'}"
        text = _fit(header, facts, count_tokens, max_tokens)
        cards.append(
            EvidenceCard(
                id=card_id,
                type=card_type,
                step=group.step,
                task_id=group.task.id,
                task_type=group.task.type,
                scaffold_version=group.scaffold_version,
                text=text,
                tokens=count_tokens(text),
                data=facts,
                privileged=card_type == "expert",
            )
        )
    return cards


def _facts(card_type: CardType, group: RolloutGroup, plan: Sequence[str] | None) -> CardData | None:
    rollouts = group.rollouts
    if card_type == "outcome":
        return outcome_data(rollouts)
    if card_type == "contrast":
        return contrast_data(rollouts) if len(rollouts) >= 2 else None
    if card_type == "failure":
        return failure_data(rollouts)
    if card_type == "utility":
        return utility_data(group) if group.scaffolded and group.probes else None
    return expert_data(rollouts, plan) if plan else None


# Facts


def _mean(values: Sequence[float]) -> float:
    return fmean(values) if values else 0.0


def outcome_data(rollouts: Sequence[Rollout]) -> OutcomeData:
    successes = sum(r.success for r in rollouts)
    rewards = [r.reward for r in rollouts]
    won = sorted((r for r in rollouts if r.success), key=lambda r: (len(r.turns), -r.reward))
    return OutcomeData(
        n=len(rollouts),
        n_scaffolded=sum(r.scaffolded for r in rollouts),
        n_probes=sum(not r.scaffolded for r in rollouts),
        successes=successes,
        success_rate=successes / len(rollouts) if rollouts else 0.0,
        reward_mean=_mean(rewards),
        reward_std=pstdev(rewards) if rewards else 0.0,
        all_failed=bool(rollouts) and successes == 0,
        all_passed=bool(rollouts) and successes == len(rollouts),
        turns_mean=_mean([len(r.turns) for r in rollouts]),
        prompt_tokens_mean=_mean([r.prompt_tokens for r in rollouts]),
        response_tokens_mean=_mean([r.response_tokens for r in rollouts]),
        winning_actions=tuple(t.action for t in won[0].turns) if won else (),
    )


def _summary(rollout: Rollout) -> RolloutSummary:
    return RolloutSummary(
        rollout_id=rollout.id,
        reward=rollout.reward,
        success=rollout.success,
        turns=len(rollout.turns),
        actions=tuple(t.action for t in rollout.turns),
    )


def contrast_data(rollouts: Sequence[Rollout]) -> ContrastData:
    order = range(len(rollouts))
    # Best: highest reward, then fewest turns, then first. Worst: lowest reward, then most turns.
    best = min(order, key=lambda i: (-rollouts[i].reward, len(rollouts[i].turns), i))
    worst = min(
        (i for i in order if i != best), key=lambda i: (rollouts[i].reward, -len(rollouts[i].turns), i)
    )
    b, w = _summary(rollouts[best]), _summary(rollouts[worst])
    diverge = None
    for turn in range(max(b.turns, w.turns)):
        if turn >= min(b.turns, w.turns) or normalize_action(b.actions[turn]) != normalize_action(
            w.actions[turn]
        ):
            diverge = turn
            break

    def at(side: RolloutSummary) -> str | None:
        return side.actions[diverge] if diverge is not None and diverge < side.turns else None

    return ContrastData(
        best=b,
        worst=w,
        diverge_turn=diverge,
        best_action_at_diverge=at(b),
        worst_action_at_diverge=at(w),
        same_reward=b.reward == w.reward,
    )


def failure_data(rollouts: Sequence[Rollout]) -> FailureData:
    counts = dict.fromkeys(FAILURE_MODES, 0)
    examples: dict[str, FailureEvent] = {}
    for rollout in rollouts:
        events = detect_failures(rollout)
        for mode in {e.mode for e in events}:
            counts[mode] += 1
        for event in events:
            examples.setdefault(event.mode, event)  # the first in group order
    return FailureData(
        counts=counts,
        examples=tuple(examples[m] for m in FAILURE_MODES if m in examples),
        failed_rollouts=sum(not r.success for r in rollouts),
    )


def utility_data(group: RolloutGroup) -> UtilityData:
    with_, without = group.scaffolded, group.probes
    success_with = _mean([float(r.success) for r in with_])
    success_without = _mean([float(r.success) for r in without])
    return UtilityData(
        n_with=len(with_),
        n_without=len(without),
        success_with=success_with,
        success_without=success_without,
        reward_with=_mean([r.reward for r in with_]),
        reward_without=_mean([r.reward for r in without]),
        delta=success_with - success_without,
    )


def expert_data(rollouts: Sequence[Rollout], plan: Sequence[str]) -> ExpertData:
    expected = [normalize_action(a) for a in plan]
    followed = {}
    for rollout in rollouts:
        taken = [normalize_action(t.action) for t in rollout.turns]
        n = 0
        while n < min(len(taken), len(expected)) and taken[n] == expected[n]:
            n += 1
        followed[rollout.id] = n
    departed = [r for r in rollouts if not r.success and followed[r.id] < len(plan)]
    departure = None
    if departed:
        furthest = max(departed, key=lambda r: followed[r.id])  # max keeps the first of ties
        turn = followed[furthest.id]
        departure = Departure(
            rollout_id=furthest.id,
            turn=turn,
            expected=plan[turn],
            taken=furthest.turns[turn].action if turn < len(furthest.turns) else None,
        )
    return ExpertData(
        plan=tuple(plan),
        followed=followed,
        first_departure=departure,
        followed_fraction_mean=_mean([n / len(plan) for n in followed.values()]),
    )


# Text


def clip_tokens(text: str, limit: int | None, count_tokens: TokenCounter) -> str:
    """The longest prefix of `text` (plus an ellipsis) within `limit` tokens; "" if none fits.

    Cuts at a word boundary where one fits (so "40 turns" never becomes "4..."), else inside a word.
    """
    if limit is None or count_tokens(text) <= limit:
        return text
    spaces = [i for i, ch in enumerate(text) if ch.isspace()]
    for ends in (spaces, range(1, len(text))):
        # Binary search for the last end whose prefix fits; each candidate is counted exactly.
        lo, hi = 0, len(ends)  # the prefixes at ends[:lo] are known to fit
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if count_tokens(_prefix(text, ends[mid - 1])) <= limit:
                lo = mid
            else:
                hi = mid - 1
        if lo:
            return _prefix(text, ends[lo - 1])
    return ""


def _prefix(text: str, end: int) -> str:
    return text[:end].rstrip() + ELLIPSIS


@dataclass(frozen=True)
class Writer:
    """Renders actions, excerpts and lists at one level of detail."""

    detail: Detail
    count_tokens: TokenCounter

    def cut(self, text: str) -> str:
        """An action or excerpt on one line, within the level's token cap ("(none)" if empty)."""
        text = " ".join(text.split())
        return clip_tokens(text, self.detail.tokens, self.count_tokens) if text else "(none)"

    def listing(self, values: Sequence[str], cut: bool = True) -> str:
        """`a | b | ... (+n) | z`: at most `items` values, keeping the head and the tail."""
        items = self.detail.items
        if items == 0 and values:
            return f"({len(values)} not shown)"
        show = self.cut if cut else str
        if items is None or len(values) <= items:
            return " | ".join(show(v) for v in values)
        head, tail = values[: (items + 1) // 2], values[len(values) - items // 2 :]
        return " | ".join([*map(show, head), f"... (+{len(values) - items})", *map(show, tail)])


def _num(x: float) -> str:
    return f"{x:.3f}".rstrip("0").rstrip(".")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _outcome_lines(d: OutcomeData, w: Writer) -> list[str]:
    won = [f"won with: {w.listing(d.winning_actions)}"] if d.winning_actions else []
    return [
        f"n={d.n} (scaffolded {d.n_scaffolded}, probes {d.n_probes}) | successes {d.successes}"
        f" (rate {_num(d.success_rate)}) | all failed: {_yes(d.all_failed)} | all passed: {_yes(d.all_passed)}",
        f"reward mean {_num(d.reward_mean)} std {_num(d.reward_std)} | turns mean {_num(d.turns_mean)}"
        f" | tokens mean: prompt {_num(d.prompt_tokens_mean)}, response {_num(d.response_tokens_mean)}",
        *won,
    ]


def _contrast_lines(d: ContrastData, w: Writer) -> list[str]:
    def side(name: str, s: RolloutSummary) -> str:
        return (
            f"{name} {s.rollout_id}: reward {_num(s.reward)}, success {_yes(s.success)}, {s.turns} turns:"
            f" {w.listing(s.actions)}"
        )

    if d.diverge_turn is None:
        diverge = "identical actions"
    else:
        best = w.cut(d.best_action_at_diverge) if d.best_action_at_diverge is not None else "(ended)"
        worst = w.cut(d.worst_action_at_diverge) if d.worst_action_at_diverge is not None else "(ended)"
        diverge = f"first divergence at turn {d.diverge_turn}: best '{best}' vs worst '{worst}'"
    same = " (same reward)" if d.same_reward else ""
    return [side("best", d.best), side("worst", d.worst), diverge + same]


def _failure_lines(d: FailureData, w: Writer) -> list[str]:
    seen = [f"{mode} {n}" for mode, n in d.counts.items() if n]
    lines = [
        f"failed rollouts: {d.failed_rollouts}",
        "rollouts per mode: " + (", ".join(seen) if seen else "no failure mode detected"),
    ]
    shown = d.examples if w.detail.items is None else d.examples[: w.detail.items]
    for e in shown:
        excerpt = w.cut(e.excerpt)
        lines.append(f"- {e.mode} {e.rollout_id} turn {e.turn}" + (f": {excerpt}" if excerpt else ""))
    return lines


def _utility_lines(d: UtilityData, w: Writer) -> list[str]:
    return [
        f"with scaffold: n={d.n_with}, success {_num(d.success_with)}, reward mean {_num(d.reward_with)}",
        f"without (probes): n={d.n_without}, success {_num(d.success_without)},"
        f" reward mean {_num(d.reward_without)}",
        f"success delta: {'+' if d.delta >= 0 else ''}{_num(d.delta)}",
    ]


def _expert_lines(d: ExpertData, w: Writer) -> list[str]:
    n = len(d.plan)
    followed = w.listing([f"{rid} {k}/{n}" for rid, k in d.followed.items()], cut=False)
    lines = [
        "PRIVILEGED: built from the expert plan; never show to the policy",
        f"plan ({n} actions): {w.listing(d.plan)}",
        f"plan prefix followed: {followed} | mean fraction {_num(d.followed_fraction_mean)}",
    ]
    if d.first_departure is None:
        lines.append("no failed rollout left the plan")
    else:
        dep = d.first_departure
        taken = w.cut(dep.taken) if dep.taken is not None else "(ended)"
        lines.append(
            f"first departure ({dep.rollout_id}, turn {dep.turn}): expected '{w.cut(dep.expected)}', took '{taken}'"
        )
    return lines


_RENDER: dict[type[Record], Callable] = {
    OutcomeData: _outcome_lines,
    ContrastData: _contrast_lines,
    FailureData: _failure_lines,
    UtilityData: _utility_lines,
    ExpertData: _expert_lines,
}


def _fit(header: str, facts: CardData, count_tokens: TokenCounter, max_tokens: int) -> str:
    """The most detailed rendering within `max_tokens`; the least detailed one cut to fit otherwise."""
    render = _RENDER[type(facts)]
    text = header
    for detail in LEVELS:
        text = "\n".join([header, *render(facts, Writer(detail, count_tokens))])
        if count_tokens(text) <= max_tokens:
            return text
    return clip_tokens(text, max_tokens, count_tokens)
