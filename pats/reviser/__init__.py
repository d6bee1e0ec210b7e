"""Revisers: turn a task type's assessment and evidence cards into a validated edit set."""

from pats.reviser.llm import LLMReviser, load_reviser_prompt
from pats.reviser.rules import RulesReviser
from pats.scaffold.validate import MODE_BUDGETS, validate_edits

__all__ = ["MODE_BUDGETS", "LLMReviser", "RulesReviser", "load_reviser_prompt", "validate_edits"]
