"""Evidence cards: deterministic, size-bounded summaries of rollout groups, and failure-mode detection."""

from pats.cards.build import KNOWN_CARDS, build_cards
from pats.cards.failures import detect_failures
from pats.types import (
    FAILURE_MODES,
    CardData,
    ContrastData,
    Departure,
    ExpertData,
    FailureData,
    FailureEvent,
    FailureMode,
    OutcomeData,
    RolloutSummary,
    UtilityData,
)

__all__ = [
    "FAILURE_MODES",
    "KNOWN_CARDS",
    "CardData",
    "ContrastData",
    "Departure",
    "ExpertData",
    "FailureData",
    "FailureEvent",
    "FailureMode",
    "OutcomeData",
    "RolloutSummary",
    "UtilityData",
    "build_cards",
    "detect_failures",
]
