"""One GRPO update of the local policy: PPO-clip over the rollouts' policy tokens, optional KL.

Items come in two kinds:
- `TrainItem` (generate mode): a token sequence whose loss mask marks the policy's own tokens;
- `ChoiceItem` (score mode): one decision among K candidate actions. The trained quantity is the
  exact log-probability of the chosen action under the policy's real distribution,
  log softmax(scores / temperature)[chosen], recomputed with gradients for all K candidates from one
  shared prompt pass. This departs from GLAM-style training, which raises the chosen action's token
  log-probs only: that is not the gradient of the distribution actions are sampled from (it ignores
  the other candidates and the length normalization). The exact version costs about one more
  batched pass over K short actions, small next to the prompt.

Where this departs from the published GRPO:
- old log-probs are recomputed in the update instead of stored at rollout time: simpler, and exactly
  on-policy for the first epoch because rollouts and update run on the same weights in pats'
  synchronous loop. With dropout off (the default: the model trains in eval mode unless
  policy.lora.dropout > 0) they are the first epoch's own log-probs, detached, so no extra pass;
- items may carry weights (1 / turns of their episode) so each episode counts once;
- the optimizer step is skipped when every advantage is zero (Adam's momentum would otherwise keep
  moving the weights with no signal) or when the loss or gradient is not finite;
- items with zero advantage are not run when kl_coef is 0 (their gradient is zero), but still count
  in the mean's denominator, so the result equals running them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from pats.backends.local import grpo

if TYPE_CHECKING:
    from pats.backends.local.policy import LocalPolicy


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


def _units(items: Sequence[Item], micro_batch: int) -> list[list[Item]]:
    """Backward units: sequences in micro-batches; choices with the same prompt and candidates
    together (one pass serves them all: the rollouts of a group share their first prompt, and
    often more when they take the same actions), each such set at batch 1."""
    sequences = [it for it in items if isinstance(it, TrainItem)]
    units: list[list[Item]] = [sequences[i : i + micro_batch] for i in range(0, len(sequences), micro_batch)]
    same: dict[tuple, list[Item]] = {}
    for it in items:
        if isinstance(it, ChoiceItem):
            same.setdefault((it.prompt_ids, it.candidates), []).append(it)
    return units + list(same.values())


def _unit_logprobs(policy: LocalPolicy, model, unit: list[Item]) -> tuple[Tensor, Tensor]:
    """(log-probs, mask) of a unit's trained quantities under `model`: (B, T - 1) for sequences,
    (B, 1) for choices of one decision (each one's log-probability under the softmax over candidates)."""
    device = policy.device
    if isinstance(unit[0], ChoiceItem):
        first = unit[0]
        scores = policy.candidate_scores(first.prompt_ids, first.candidates, model=model).float()  # (K,)
        chosen = torch.tensor([it.chosen for it in unit], device=scores.device)  # (B,)
        logp = torch.log_softmax(scores / policy.spec.temperature, dim=-1)[chosen]
        return logp.view(-1, 1), torch.ones((len(unit), 1), device=device)
    longest = max(len(it.input_ids) for it in unit)
    ids = torch.full((len(unit), longest), policy.pad_id, device=device)  # (B, T), right-padded
    attention = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids)
    for i, it in enumerate(unit):
        ids[i, : len(it.input_ids)] = torch.tensor(it.input_ids, device=device)
        attention[i, : len(it.input_ids)] = 1
        loss_mask[i, : len(it.loss_mask)] = torch.tensor(it.loss_mask, device=device)
    with policy.autocast_context():
        logp = grpo.token_logprobs(model, ids, attention, policy.trainer.logprob_chunk)  # (B, T - 1)
    return logp.float(), (loss_mask[:, 1:] * attention[:, 1:]).float()  # targets are tokens 1..T-1


def _tokens(unit: list[Item]) -> int:
    if isinstance(unit[0], ChoiceItem):
        return sum(len(c) for c in unit[0].candidates)
    return sum(sum(it.loss_mask[1:]) for it in unit)


def run_update(policy: LocalPolicy, batch: Sequence[Item]) -> dict[str, float]:
    """`epochs` passes over the batch, one optimizer step each, gradients accumulated over units.

    Returns loss, clip_frac, approx_kl (old vs new), ratio_mean, kl (to the reference), grad_norm
    (before clipping), averaged over epochs; tokens and items trained per epoch; steps taken;
    skipped (1 when no step was taken), no_signal (all advantages zero), nonfinite (epochs dropped).
    """
    trainer, model = policy.trainer, policy.model
    items = list(batch)
    stats = dict.fromkeys(("loss", "clip_frac", "approx_kl", "ratio_mean", "kl", "grad_norm"), 0.0)
    stats |= {"tokens": 0.0, "items": 0.0, "steps": 0.0, "skipped": 1.0, "no_signal": 0.0, "nonfinite": 0.0}
    if not items or all(it.advantage == 0 for it in items):
        stats["no_signal"] = 1.0
        return stats
    total_weight = sum(it.weight for it in items)
    use_kl = trainer.kl_coef > 0
    trained = items if use_kl else [it for it in items if it.advantage != 0]
    units = _units(trained, trainer.micro_batch)

    # Dropout stays off (eval mode) unless the spec asks for LoRA dropout. Then the first epoch's
    # forward pass gives exactly the old log-probs, and a separate no-grad pass (a quarter of the
    # update's time) is needed only with dropout on.
    dropout = policy.spec.lora is not None and policy.spec.lora.dropout > 0
    model.eval()
    old: list[Tensor | None] = [None] * len(units)
    ref: list[Tensor] = []
    with torch.no_grad():
        if dropout:
            old = [_unit_logprobs(policy, model, unit)[0] for unit in units]
        if use_kl:
            with policy.reference_model() as reference:
                ref = [_unit_logprobs(policy, reference, unit)[0] for unit in units]

    sums = dict.fromkeys(("loss", "clip_frac", "approx_kl", "ratio_mean", "kl", "grad_norm"), 0.0)
    for _ in range(trainer.epochs):
        policy.optimizer.zero_grad(set_to_none=True)
        model.train(dropout)
        epoch_loss, epoch_tokens = 0.0, 0.0
        for i, unit in enumerate(units):
            logp, mask = _unit_logprobs(policy, model, unit)  # (B, N)
            if old[i] is None:
                old[i] = logp.detach()
            old_logp = old[i]
            adv = torch.tensor([it.advantage for it in unit], device=logp.device)  # (B,)
            weights = torch.tensor([it.weight for it in unit], device=logp.device)  # (B,)
            loss, clip_stats = grpo.ppo_clip_loss(
                logp, old_logp, adv, mask, trainer.clip_low, trainer.clip_high, weights
            )
            if use_kl:
                per_seq_kl = torch.stack(
                    [grpo.kl_penalty(logp[b], ref[i][b], mask[b]) for b in range(len(unit))]
                )  # (B,)
                kl = (per_seq_kl * weights).sum() / weights.sum()
                loss = loss + trainer.kl_coef * kl
                sums["kl"] += kl.item() * float(weights.sum()) / total_weight
            share = float(weights.sum()) / total_weight  # this unit's part of the batch mean
            (loss * share).backward()
            epoch_loss += loss.item() * share
            tokens = float(mask.sum())
            epoch_tokens += tokens
            for key, value in clip_stats.items():
                sums[key] += float(value) * tokens
        model.eval()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(policy.params, trainer.max_grad_norm))
        sums["loss"] += epoch_loss
        sums["grad_norm"] += grad_norm
        if not (math.isfinite(grad_norm) and math.isfinite(epoch_loss)):
            policy.optimizer.zero_grad(set_to_none=True)
            stats["nonfinite"] += 1
            continue
        policy.optimizer.step()
        stats["steps"] += 1
    policy.optimizer.zero_grad(set_to_none=True)

    epochs, token_total = trainer.epochs, max(epoch_tokens, 1.0) * trainer.epochs
    stats |= {
        "loss": sums["loss"] / epochs,
        "grad_norm": sums["grad_norm"] / epochs,
        "kl": sums["kl"] / epochs,
        "clip_frac": sums["clip_frac"] / token_total,
        "approx_kl": sums["approx_kl"] / token_total,
        "ratio_mean": sums["ratio_mean"] / token_total,
        "tokens": float(sum(_tokens(u) for u in units)),
        "items": float(len(trained)),
        "skipped": 0.0 if stats["steps"] > 0 else 1.0,
    }
    return stats
