"""What the local policy's update trains on (`TrainItem`, `ChoiceItem`) and what it needs of the
policy (`Updatable`), in a module of their own so that training.py, sharing.py and policy.py all
import it and none of them imports another in a circle."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from pats.spec.models import LocalTrainerSpec, PolicySpec


class Updatable(Protocol):
    """What an update needs of the policy (pats.backends.local.policy.LocalPolicy, which calls
    `training.run_update` with itself); a Protocol so the update's modules do not import the policy's."""

    spec: PolicySpec
    trainer: LocalTrainerSpec
    device: torch.device
    pad_id: int
    model: torch.nn.Module
    params: list[Tensor]
    optimizer: torch.optim.Optimizer

    def autocast_context(self) -> AbstractContextManager: ...

    def bf16_weights(self) -> AbstractContextManager: ...

    def premise_ids(self, candidates: Sequence[Sequence[int]]) -> list[int]: ...

    def candidate_scores(
        self, prompt_ids: Sequence[int], candidates: Sequence[Sequence[int]], model=None
    ) -> Tensor: ...

    def reference_model(self) -> AbstractContextManager[torch.nn.Module]: ...


@dataclass(frozen=True)
class TrainItem:
    """A prompt + response token sequence; loss_mask is 1 on the policy's own tokens."""

    input_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]
    advantage: float
    weight: float = 1.0  # share of its episode, e.g. 1 / turns, so every episode counts once

    def __post_init__(self):
        object.__setattr__(self, "input_ids", tuple(self.input_ids))
        object.__setattr__(self, "loss_mask", tuple(self.loss_mask))
        if len(self.input_ids) != len(self.loss_mask):
            raise ValueError(f"{len(self.input_ids)} input ids but {len(self.loss_mask)} mask entries")
        if not any(self.loss_mask[1:]):
            raise ValueError("loss_mask marks no token after the first: nothing to train")
        if self.weight <= 0:
            raise ValueError(f"weight must be positive, got {self.weight}")

    @classmethod
    def of(
        cls, prompt: Sequence[int], response: Sequence[int], advantage: float, weight: float = 1.0
    ) -> TrainItem:
        """Prompt then response, the loss mask on the response's tokens only."""
        return cls(
            input_ids=(*prompt, *response),
            loss_mask=(0,) * len(prompt) + (1,) * len(response),
            advantage=advantage,
            weight=weight,
        )


@dataclass(frozen=True)
class ChoiceItem:
    """A score-mode decision: the prompt, each candidate's tokens (end token included), the choice."""

    prompt_ids: tuple[int, ...]
    candidates: tuple[tuple[int, ...], ...]
    chosen: int
    advantage: float
    weight: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "prompt_ids", tuple(self.prompt_ids))
        object.__setattr__(self, "candidates", tuple(tuple(c) for c in self.candidates))
        if not 0 <= self.chosen < len(self.candidates):
            raise ValueError(f"chosen {self.chosen} is not one of {len(self.candidates)} candidates")
        if not self.prompt_ids or not all(self.candidates):
            raise ValueError("the prompt and every candidate need at least one token")
        if self.weight <= 0:
            raise ValueError(f"weight must be positive, got {self.weight}")


Item = TrainItem | ChoiceItem
