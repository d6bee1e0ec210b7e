"""The local policy's attention on a CPU: torch's SDPA without gradients, a recomputed math core with.

Under torch 2.13 on a CPU, SDPA with a mask runs its flash-attention kernel, whose backward pass took
about 10 ms a call in the quickstart's update, eight times its forward, and 34% of the update's time
(bench/perf/update.py, 2-core EPYC). With gradients, attention here is the plain math instead
(scores, softmax in fp32, weighted values: what transformers' eager attention computes), run under
activation checkpointing: the backward recomputes the scores rather than keeping them, so only the
inputs are saved, as with flash attention, and the same update took 0.76x the time side by side in
one process (0.70x in separate ones) at the same peak memory (docs/journal/2026-12-07-update-attention.md). Without gradients (rollouts, evaluation)
flash attention is the faster of the two at the packed passes' shapes and stays. In fp32 (a CPU
without native bf16, where pats leaves autocast off; a 2-core EPYC with AVX2 only) the two were within
that machine's noise: 1.06x flash's time side by side in one process
(bench/results/update_tasks3_prefix_prefix-flash_fp32-avx2.json), 0.95x in separate processes with a
peak ~40 MB lower (docs/journal/2026-12-07-avx2-machine.md), so one rule serves both.

`RECOMPUTED` switches the math core off (every pass then runs torch's SDPA), for benchmarks that put
the two side by side in one process.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

NAME = "sdpa_recomputed"  # the attn_implementation registered with transformers
RECOMPUTED = True  # with gradients on a CPU: the recomputed math core (False: torch's SDPA)


def _core(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, scaling: float) -> Tensor:
    """Attention of (B, H, Q, D) queries over (B, Hkv, K, D) keys/values, each key/value head
    serving H / Hkv query heads; `mask` (B or 1, 1, Q, K): True or 0.0 where a query may look. (B, H, Q, D)"""
    from transformers.integrations.sdpa_attention import repeat_kv

    groups = query.shape[1] // key.shape[1]
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)  # (B, H, K, D) each
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling  # (B, H, Q, K)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    exact = torch.promote_types(scores.dtype, torch.float32)  # bf16 scores: softmax in fp32; fp64 stays
    probs = torch.softmax(scores, dim=-1, dtype=exact).to(query.dtype)
    return torch.matmul(probs, value)


def attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers' attention interface: (B, Q, H, D) output, no weights."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    recompute = RECOMPUTED and torch.is_grad_enabled() and query.device.type == "cpu" and dropout == 0.0
    if not recompute:
        return sdpa_attention_forward(
            module,
            query,
            key,
            value,
            attention_mask,
            dropout=dropout,
            scaling=scaling,
            is_causal=is_causal,
            **kwargs,
        )
    if attention_mask is None and query.shape[2] > 1 and getattr(module, "is_causal", True):
        q, k = query.shape[2], key.shape[2]  # causal, the last query beside the last key
        attention_mask = torch.ones((q, k), dtype=torch.bool, device=query.device).tril(k - q)[None, None]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out = checkpoint(_core, query, key, value, attention_mask, scale, use_reentrant=False)
    return out.transpose(1, 2).contiguous(), None


def applies(model, device: torch.device) -> bool:
    """Whether the model takes this attention: on a CPU, a model on SDPA that routes its attention
    through transformers' attention interface (older architectures call SDPA themselves)."""
    return (
        device.type == "cpu"
        and model.config._attn_implementation == "sdpa"
        and bool(getattr(model, "_supports_attention_backend", False))
    )


def register() -> str:
    """Make NAME known to transformers (its attention and its mask, SDPA's boolean one); returns NAME."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
    return NAME


def takes_boolean_mask(model) -> bool:
    """Whether the model's attention reads a boolean mask (True = attend) rather than an additive one."""
    return model.config._attn_implementation in ("sdpa", NAME)
