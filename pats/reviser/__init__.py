"""Revisers: turn a task type's assessment and evidence cards into a validated edit set."""

from pats.reviser.rules import RulesReviser
from pats.reviser.validate import MODE_BUDGETS, validate_edits

__all__ = ["MODE_BUDGETS", "RulesReviser", "validate_edits"]
