"""One GRPO update of the local policy: PPO-clip over the rollouts' policy tokens, optional KL.

Items (pats.backends.local.items) come in two kinds:
- `TrainItem` (generate mode): a token sequence whose loss mask marks the policy's own tokens;
- `ChoiceItem` (score mode): one decision among K candidate actions. The trained quantity is the
  exact log-probability of the chosen action under the policy's real distribution,
  log softmax(scores / temperature)[chosen], recomputed with gradients for all K candidates from one
  shared prompt pass. This departs from GLAM-style training, which raises the chosen action's token
  log-probs only: that is not the gradient of the distribution actions are sampled from (it ignores
  the other candidates and the length normalization). The exact version costs about one more
  batched pass over K short actions, small next to the prompt.

Decisions that share a prompt prefix (the system prompt of a rollout group) run it once per
optimizer step, with gradients, and their suffixes against its keys/values (sharing.py;
`trainer.update_prefix_sharing`, on by default), in both modes. The gradient is the same as running
every whole prompt; with LoRA dropout on, the shared prefix draws one dropout mask for all its
decisions.

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

Generate mode's sequences (`TrainItem`) go `trainer.micro_batch` per pass, whole or after their prefix.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from pats.backends.local import grpo
from pats.backends.local.items import ChoiceItem, Item, TrainItem, Updatable
from pats.backends.local.memory import release_free_memory
from pats.backends.local.scoring import supports_batching
from pats.backends.local.sharing import SharedPrefix, passes, prefix_groups, right_padded

Decision = tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]  # (prompt ids, candidates)


@dataclass(frozen=True)
class Group:
    """Backward units whose prompts start with `prefix`, which runs once for all of them (or nothing
    shared: an empty prefix)."""

    prefix: tuple[int, ...]
    units: tuple[tuple[Item, ...], ...]


def update_groups(
    items: Sequence[Item], micro_batch: int, prefix_sharing: bool, one_per_pass: bool = False
) -> list[Group]:
    """How the update runs `items`: its backward units (the items of one forward/backward pass),
    grouped by shared prefix. Without prefix sharing, every unit of `_units` alone; with it,
    sequences by `_sequence_groups` and choices by `_prefix_groups`; with `one_per_pass`, every item
    its own pass over its whole prompt, nothing shared: the slow reference the shared passes must
    equal (tests, bench/perf/update.py). Public so benchmarks and tests count and check the passes."""
    if one_per_pass:
        return [Group((), ((it,),)) for it in items]
    if not prefix_sharing:
        return [Group((), (tuple(unit),)) for unit in _units(items, micro_batch)]
    sequences = [it for it in items if isinstance(it, TrainItem)]
    choices = [it for it in items if isinstance(it, ChoiceItem)]
    return _sequence_groups(sequences, micro_batch) + _prefix_groups(choices)


def _sequence_groups(sequences: Sequence[TrainItem], micro_batch: int) -> list[Group]:
    """Sequences grouped by the prompt prefix they share (sharing.prefix_groups over their prompts:
    the tokens before the first trained one), each group's in micro-batches."""
    prompts = [it.input_ids[: it.loss_mask.index(1)] for it in sequences]
    alone = [it for it, prompt in zip(sequences, prompts, strict=True) if not prompt]
    shareable = [i for i, prompt in enumerate(prompts) if prompt]
    groups = [Group((), (tuple(unit),)) for unit in _units(alone, micro_batch)]
    for n, members in prefix_groups([prompts[i] for i in shareable]):
        mine = [sequences[shareable[m]] for m in members]
        units = tuple(tuple(mine[i : i + micro_batch]) for i in range(0, len(mine), micro_batch))
        groups.append(Group(mine[0].input_ids[:n], units))
    return groups


def _prefix_groups(choices: Sequence[ChoiceItem]) -> list[Group]:
    """Choices grouped by the prompt prefix they share (sharing.prefix_groups); a group's decisions
    in passes (sharing.passes), the choices of one decision always in the same pass."""
    same: dict[Decision, list[ChoiceItem]] = {}
    for it in choices:
        same.setdefault((it.prompt_ids, it.candidates), []).append(it)
    decisions = list(same)
    groups = []
    for n, members in prefix_groups([prompt for prompt, _ in decisions]):
        mine = [decisions[d] for d in members]
        if n == 0:  # nothing in common: each decision alone, whole
            groups += [Group((), (tuple(same[d]),)) for d in mine]
            continue
        sizes = [len(prompt) - n + sum(map(len, candidates)) for prompt, candidates in mine]
        units = tuple(tuple(it for d in part for it in same[mine[d]]) for part in passes(sizes, n))
        groups.append(Group(mine[0][0][:n], units))
    return groups


def _units(items: Sequence[Item], micro_batch: int) -> list[list[Item]]:
    """Backward units: sequences in micro-batches; choices with the same prompt and candidates
    together (one pass serves them all: the rollouts of a group share their first prompt, and
    often more when they take the same actions), each such set at batch 1."""
    sequences: list[Item] = [it for it in items if isinstance(it, TrainItem)]
    units: list[list[Item]] = [sequences[i : i + micro_batch] for i in range(0, len(sequences), micro_batch)]
    same: dict[tuple, list[Item]] = {}
    for it in items:
        if isinstance(it, ChoiceItem):
            same.setdefault((it.prompt_ids, it.candidates), []).append(it)
    return units + list(same.values())


def unit_logprobs(
    policy: Updatable, model, unit: Sequence[Item], shared: SharedPrefix
) -> tuple[Tensor, Tensor]:
    """(log-probs, mask) of a unit's trained quantities under `model`: (B, T - 1) for sequences
    (fewer after a shared prefix: SharedPrefix.sequences), (B, 1) for choices (each one's log-probability
    under the softmax over its candidates), their prompts' prefix from `shared` unless it is empty
    (then the unit is whole sequences or one decision's choices). Public beside `update_groups` so
    tests can check one unit's values after a shared prefix against its whole prompt's."""
    device = policy.device
    sequences, choices = _kinds(unit)
    if sequences and shared.prefix:
        return shared.sequences(sequences)
    if choices and shared.prefix:
        decisions = list(dict.fromkeys((it.prompt_ids, it.candidates) for it in choices))
        scores_of = dict(zip(decisions, shared.scores(decisions), strict=True))  # each (K_d,)
        temperature = policy.spec.temperature
        each = [
            torch.log_softmax(scores_of[it.prompt_ids, it.candidates].float() / temperature, dim=-1)[
                it.chosen
            ]
            for it in choices
        ]
        return torch.stack(each).view(-1, 1), torch.ones((len(unit), 1), device=device)  # (B, 1)
    if choices:
        first = choices[0]
        scores = policy.candidate_scores(first.prompt_ids, first.candidates, model=model).float()  # (K,)
        chosen = torch.tensor([it.chosen for it in choices], device=scores.device)  # (B,)
        logp = torch.log_softmax(scores / policy.spec.temperature, dim=-1)[chosen]
        return logp.view(-1, 1), torch.ones((len(unit), 1), device=device)
    ids, attention, loss_mask = right_padded(sequences, 0, policy.pad_id, device)  # (B, T) each
    with policy.autocast_context():
        logp = grpo.token_logprobs(model, ids, attention, policy.trainer.logprob_chunk)  # (B, T - 1)
    return logp.float(), (loss_mask[:, 1:] * attention[:, 1:]).float()  # targets are tokens 1..T-1


def _kinds(unit: Sequence[Item]) -> tuple[list[TrainItem], list[ChoiceItem]]:
    """A unit's sequences and its choices, typed: one of the two is empty (`_units`)."""
    return [it for it in unit if isinstance(it, TrainItem)], [it for it in unit if isinstance(it, ChoiceItem)]


def _tokens(unit: Sequence[Item]) -> int:
    sequences, choices = _kinds(unit)
    if choices:
        decisions = dict.fromkeys((it.prompt_ids, it.candidates) for it in choices)
        return sum(len(c) for _, candidates in decisions for c in candidates)
    return sum(sum(it.loss_mask[1:]) for it in sequences)


def _unit_loss(
    trainer, unit: Sequence[Item], logp: Tensor, old: Tensor, mask: Tensor, ref: Tensor | None
) -> tuple[Tensor, dict[str, Tensor], float]:
    """(loss, clip stats, KL to the reference) of one unit: PPO-clip, plus kl_coef x KL when `ref`
    (the reference log-probs) is given. All (B, N) but the unit."""
    adv = torch.tensor([it.advantage for it in unit], device=logp.device)  # (B,)
    weights = torch.tensor([it.weight for it in unit], device=logp.device)  # (B,)
    loss, clip_stats = grpo.ppo_clip_loss(logp, old, adv, mask, trainer.clip_low, trainer.clip_high, weights)
    if ref is None:
        return loss, clip_stats, 0.0
    per_seq_kl = torch.stack([grpo.kl_penalty(logp[b], ref[b], mask[b]) for b in range(len(unit))])  # (B,)
    kl = (per_seq_kl * weights).sum() / weights.sum()
    return loss + trainer.kl_coef * kl, clip_stats, kl.item()


def _all_logprobs(policy: Updatable, model, groups: Sequence[Group]) -> list[Tensor]:
    """Every unit's log-probs under `model`, in order; call without gradients."""
    out = []
    for group in groups:
        shared = SharedPrefix(policy, model, group.prefix)
        out += [unit_logprobs(policy, model, unit, shared)[0] for unit in group.units]
    return out


def run_update(policy: Updatable, batch: Sequence[Item], one_per_pass: bool = False) -> dict[str, float]:
    """`epochs` passes over the batch, one optimizer step each, gradients accumulated over units
    (`update_groups`; `one_per_pass`: each item alone, the reference the shared passes must equal).

    Returns loss, clip_frac, approx_kl (old vs new), ratio_mean, kl (to the reference), grad_norm
    (before clipping), averaged over epochs; tokens and items trained per epoch; steps taken;
    skipped (1 when no step was taken), no_signal (all advantages zero), nonfinite (epochs dropped).
    """
    with policy.bf16_weights():  # frozen weights cast once, not once per pass (same numbers)
        return _update(policy, batch, one_per_pass)


def _update(policy: Updatable, batch: Sequence[Item], one_per_pass: bool) -> dict[str, float]:
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
    sharing = trainer.update_prefix_sharing and supports_batching(model)  # packed passes need plain masks
    groups = update_groups(trained, trainer.micro_batch, sharing, one_per_pass)
    units = [unit for group in groups for unit in group.units]

    # Dropout stays off (eval mode) unless the spec asks for LoRA dropout. Then the first epoch's
    # forward pass gives exactly the old log-probs, and a separate no-grad pass (a quarter of the
    # update's time) is needed only with dropout on.
    dropout = policy.spec.lora is not None and policy.spec.lora.dropout > 0
    model.eval()
    old: list[Tensor | None] = [None] * len(units)
    ref: list[Tensor] = []
    with torch.no_grad():
        if dropout:
            old[:] = _all_logprobs(policy, model, groups)
        if use_kl:  # the reference shares prefixes too: its own keys/values, adapter off
            with policy.reference_model() as reference:
                ref = _all_logprobs(policy, reference, groups)

    sums = dict.fromkeys(("loss", "clip_frac", "approx_kl", "ratio_mean", "kl", "grad_norm"), 0.0)
    for _ in range(trainer.epochs):
        policy.optimizer.zero_grad(set_to_none=True)
        model.train(dropout)
        epoch_loss, epoch_tokens = 0.0, 0.0
        i = 0  # the unit's number, for its old and reference log-probs
        for group in groups:
            shared = SharedPrefix(policy, model, group.prefix)  # the prefix's pass, with gradients
            for unit in group.units:
                logp, mask = unit_logprobs(policy, model, unit, shared)  # (B, N)
                old_logp = old[i]
                if old_logp is None:
                    old_logp = old[i] = logp.detach()
                loss, clip_stats, kl = _unit_loss(
                    trainer, unit, logp, old_logp, mask, ref[i] if use_kl else None
                )
                share = sum(it.weight for it in unit) / total_weight  # this unit's part of the batch mean
                (loss * share).backward()
                epoch_loss += loss.item() * share
                sums["kl"] += kl * share
                tokens = float(mask.sum())
                epoch_tokens += tokens
                for key, value in clip_stats.items():
                    sums[key] += float(value) * tokens
                i += 1
                release_free_memory()  # the unit's activations (pats.backends.local.memory)
            shared.backward()  # the prefix's part of the gradient, once for all of its units
            release_free_memory()
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
