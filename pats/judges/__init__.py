"""Judges: pick a review mode per task type (and, for the LLM judge, grade entries)."""

from pats.judges.stats import StatsJudge, pick_mode, update_ema

__all__ = ["StatsJudge", "pick_mode", "update_ema"]
