"""The local backend: a transformers policy with LoRA or full fine-tuning, trained with GRPO."""

from pats.backends.local.items import ChoiceItem, TrainItem
from pats.backends.local.policy import LocalPolicy, bf16_autocast_supported
from pats.backends.local.scoring import score_candidates
from pats.backends.local.training import run_update

__all__ = [
    "ChoiceItem",
    "LocalPolicy",
    "TrainItem",
    "bf16_autocast_supported",
    "run_update",
    "score_candidates",
]
