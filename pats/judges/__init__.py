"""Judges: pick a review mode per task type (and, for the LLM judge, grade entries)."""

from pats.judges.llm import LLMJudge, load_rubric
from pats.judges.stats import StatsJudge, pick_mode, update_ema

__all__ = ["LLMJudge", "StatsJudge", "load_rubric", "pick_mode", "update_ema"]
