"""Evidence cards: deterministic, size-bounded summaries of rollout groups, and failure-mode detection."""

from pats.cards.build import (
    KNOWN_CARDS,
    ContrastData,
    Departure,
    ExpertData,
    FailureData,
    OutcomeData,
    RolloutSummary,
    UtilityData,
    build_cards,
)
from pats.cards.failures import FAILURE_MODES, FailureEvent, FailureMode, detect_failures

__all__ = [
    "FAILURE_MODES",
    "KNOWN_CARDS",
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
