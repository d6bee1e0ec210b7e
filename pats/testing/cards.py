"""Cards for tests of judges and revisers: state only the facts a test is about.

`card_facts("outcome", success_rate=0.5)` is an `OutcomeData` whose other facts are those of an empty
group (zero counts and means, no actions, nothing failed or passed); likewise for every card type.
Nested facts may be given as dicts (`best={"rollout_id": "r0", ...}`): the record validates them.
`evidence_card("t1", "utility", delta=0.2)` is a whole card around such facts.
"""

from __future__ import annotations

from typing import Any

from pats.types import (
    CardData,
    CardType,
    ContrastData,
    EvidenceCard,
    ExpertData,
    FailureData,
    OutcomeData,
    UtilityData,
)

_NO_ROLLOUT = {"rollout_id": "", "reward": 0.0, "success": False, "turns": 0, "actions": ()}

EMPTY_FACTS: dict[CardType, tuple[type[CardData], dict[str, Any]]] = {
    "outcome": (
        OutcomeData,
        {
            "n": 0,
            "n_scaffolded": 0,
            "n_probes": 0,
            "successes": 0,
            "success_rate": 0.0,
            "reward_mean": 0.0,
            "reward_std": 0.0,
            "all_failed": False,
            "all_passed": False,
            "turns_mean": 0.0,
            "prompt_tokens_mean": 0.0,
            "response_tokens_mean": 0.0,
        },
    ),
    "contrast": (
        ContrastData,
        {
            "best": _NO_ROLLOUT,
            "worst": _NO_ROLLOUT,
            "diverge_turn": None,
            "best_action_at_diverge": None,
            "worst_action_at_diverge": None,
            "same_reward": True,
        },
    ),
    "failure": (FailureData, {"counts": {}, "examples": (), "failed_rollouts": 0}),
    "utility": (
        UtilityData,
        {
            "n_with": 0,
            "n_without": 0,
            "success_with": 0.0,
            "success_without": 0.0,
            "reward_with": 0.0,
            "reward_without": 0.0,
            "delta": 0.0,
        },
    ),
    "expert": (
        ExpertData,
        {"plan": (), "followed": {}, "first_departure": None, "followed_fraction_mean": 0.0},
    ),
}


def card_facts(card_type: CardType, **facts: Any) -> CardData:
    """The facts record of `card_type`: an empty group's, with `facts` set."""
    model, empty = EMPTY_FACTS[card_type]
    return model(**{**empty, **facts})


def evidence_card(
    task_id: str,
    card_type: CardType,
    task_type: str = "twc",
    step: int = 1,
    text: str = "",
    scaffold_version: str = "v1",
    privileged: bool = False,
    **facts: Any,
) -> EvidenceCard:
    """A `card_type` card of `task_id`'s group at `step` (id `c<step>-<task_id>-<card_type>`, as the
    card builder names them), its tokens the words of `text`, its facts `card_facts(card_type, **facts)`."""
    return EvidenceCard(
        id=f"c{step}-{task_id}-{card_type}",
        type=card_type,
        step=step,
        task_id=task_id,
        task_type=task_type,
        scaffold_version=scaffold_version,
        text=text,
        tokens=len(text.split()),
        data=card_facts(card_type, **facts),
        privileged=privileged,
    )
