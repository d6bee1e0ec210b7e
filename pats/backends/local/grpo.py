"""GRPO pieces as small pure functions on tensors: advantages, token log-probs, PPO-clip, KL, scores.

Shapes are commented: B sequences, T tokens, V vocabulary, G rollouts in a group, K candidate actions.
Where this departs from the published GRPO (DeepSeekMath) objective:
- the clipped surrogate is averaged over each sequence's tokens and then over sequences, as GRPO
  does, but sequences may carry weights (e.g. 1 / turns of their episode) so that an episode split
  into several items counts once;
- advantages are group-normalized like GRPO's outcome supervision; dividing by the std is optional
  (Dr. GRPO drops it), and the std is the population std (GRPO papers are silent; verl uses the
  sample std, which differs by sqrt(G / (G - 1))).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def group_advantages(rewards: Tensor, normalize_std: bool, eps: float = 1e-6) -> Tensor:
    """Reward minus the group mean, divided by (population std + eps) when asked. (G,) -> (G,)"""
    rewards = rewards.double()  # (G,)
    if rewards.max() == rewards.min():
        return torch.zeros_like(rewards)  # all equal: exactly no signal (the mean may round off)
    centered = rewards - rewards.mean()
    if normalize_std:
        centered = centered / (rewards.std(correction=0) + eps)
    return centered


def _chunk_logprobs(hidden: Tensor, targets: Tensor, head_weight: Tensor) -> Tensor:
    """Log-prob of `targets` under the head's logits for one chunk. (B, C, H), (B, C) -> (B, C)"""
    logits = F.linear(hidden, head_weight).float()  # (B, C, V)
    return torch.gather(logits.log_softmax(-1), -1, targets.unsqueeze(-1)).squeeze(-1)


def hidden_logprobs(hidden: Tensor, targets: Tensor, head: torch.nn.Module, chunk: int) -> Tensor:
    """Log-probs of `targets` from hidden states, `chunk` positions at a time. (B, N, H) -> (B, N)

    Full-vocabulary fp32 logits exist for one chunk only. With gradients on, each chunk is
    checkpointed, so the backward pass recomputes the chunk's logits instead of keeping every
    chunk's (B, C, V) softmax alive until backward (the 400 MB item in notes/facts.md).
    """
    if getattr(head, "bias", None) is not None:
        raise ValueError("the LM head has a bias; hidden_logprobs supports bias-free heads only")
    weight = head.weight
    if not isinstance(weight, Tensor):  # a Module's attributes are typed Tensor | Module
        raise ValueError("the LM head has no weight tensor; hidden_logprobs supports linear heads only")
    out = []
    for start in range(0, hidden.shape[1], chunk):
        h, t = hidden[:, start : start + chunk], targets[:, start : start + chunk]
        if torch.is_grad_enabled() and h.requires_grad:
            out.append(checkpoint(_chunk_logprobs, h, t, weight, use_reentrant=False))
        else:
            out.append(_chunk_logprobs(h, t, weight))
    return torch.cat(out, dim=1)


def token_logprobs(model, input_ids: Tensor, attention_mask: Tensor, chunk: int) -> Tensor:
    """Log-prob of each next token: out[:, i] = log p(input_ids[:, i + 1] | input_ids[:, : i + 1]).

    (B, T), (B, T) -> (B, T - 1). Runs the decoder for hidden states and the output embeddings as
    the head (tied or not), so the model's full logits are never materialized. Padding positions get
    meaningless values; callers mask them. Right padding is assumed (positions count from 0).
    """
    decoder = model.get_decoder()
    hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state  # (B, T, H)
    head = model.get_output_embeddings()
    return hidden_logprobs(hidden[:, :-1], input_ids[:, 1:], head, chunk)  # (B, T - 1)


def ppo_clip_loss(
    logp_new: Tensor,
    logp_old: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float,
    clip_high: float,
    weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate (to minimize). (B, T), (B, T), (B,), (B, T) [, weights (B,)] -> scalar.

    Averaged over each sequence's masked tokens, then over sequences (weighted when `weights` is
    given). The per-sequence mean keeps a long episode from counting more than a short one: with a
    per-token mean over the batch, long failed episodes (they run out of turns) would dominate.
    Stats (detached): clip fraction, approximate KL (k3 of old vs new), mean ratio, all token-averaged.
    """
    mask = mask.to(logp_new.dtype)  # (B, T)
    log_ratio = (logp_new - logp_old) * mask  # zero on masked tokens: keeps exp() finite there
    ratio = torch.exp(log_ratio)  # (B, T)
    adv = advantages.to(logp_new.dtype).unsqueeze(1)  # (B, 1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)  # (B, T)
    per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)  # (B,)
    w = torch.ones_like(per_seq) if weights is None else weights.to(per_seq.dtype)
    loss = (per_seq * w).sum() / w.sum()
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        # Tokens where min() picked the clipped term: their gradient is cut.
        clipped_tokens = (clipped < unclipped).to(mask.dtype) * mask
        stats = {
            "clip_frac": clipped_tokens.sum() / n,
            "approx_kl": ((ratio - 1 - log_ratio) * mask).sum() / n,
            "ratio_mean": (ratio * mask).sum() / n,
        }
    return loss, stats


def kl_penalty(logp: Tensor, logp_ref: Tensor, mask: Tensor) -> Tensor:
    """k3 ("low_var_kl") estimate of KL(pi || pi_ref) on sampled tokens, masked mean. (B, T) x3 -> ()

    k3 = exp(ref - logp) - (ref - logp) - 1, always >= 0 and unbiased for KL under samples of pi.
    The log-ratio is clamped to +-20 (as verl does) so one outlier token cannot overflow exp().
    """
    mask = mask.to(logp.dtype)
    delta = torch.clamp(logp_ref - logp, -20.0, 20.0)
    k3 = torch.exp(delta) - delta - 1.0  # (B, T)
    return (k3 * mask).sum() / mask.sum().clamp(min=1)


def sequence_score(token_logprobs: Tensor, mask: Tensor, normalization: Literal["mean", "sum"]) -> Tensor:
    """Score of each candidate: sum or mean of its masked token log-probs. (N, L), (N, L) -> (N,)"""
    mask = mask.to(token_logprobs.dtype)
    total = (token_logprobs * mask).sum(1)  # (N,)
    if normalization == "sum":
        return total
    if normalization == "mean":
        return total / mask.sum(1).clamp(min=1)
    raise ValueError(f"unknown score normalization '{normalization}'; known: mean, sum")


def action_distribution(scores: Tensor, temperature: float) -> Tensor:
    """The policy's distribution over candidate actions: softmax(scores / T). (K,) -> (K,)"""
    return torch.softmax(scores / temperature, dim=-1)
