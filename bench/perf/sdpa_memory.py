#!/usr/bin/env python3
"""What the SDPA path costs on a CUDA GPU, against pats' memory plan (pats/backends/verl/plan.py).

    python3 bench/perf/sdpa_memory.py [--tokens 8192] [--vocab 151936] [--out FILE.json]

Needs only torch and transformers (the GPU machines lent here have them, and no verl, vLLM or network),
so it runs from a bare checkout. Three measurements, each the extra peak of CUDA memory over what was
allocated before (torch.cuda.max_memory_allocated), against the plan's formula:
  1. the mask transformers builds for packed sequences (verl's remove-padding layout: one row, position
     ids restarting at 0, no attention mask, no cache) on a one-layer Qwen2-shaped model under SDPA:
     plan: tokens^2 x 1 B (bool);
  2. torch's SDPA given that bool mask with bf16 q/k/v: plan: the kernel's bf16 bias, tokens^2 x 2 B,
     read from the code and never measured on a GPU before;
  3. the whole-row log-softmax of bf16 logits that verl 0.9.1's logprobs_from_logits_v2 does without
     flash-attn (its bf16 branch, copied here since verl is not installed there): plan: tokens x vocab x 2 B.
Prints one JSON object (and writes it to --out): each measured number, the plan's, and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
import torch.nn.functional as F

GB = 1e9


def extra_peak(fn) -> int:
    """Bytes the call adds to the peak of allocated CUDA memory."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def packed_mask(tokens: int) -> tuple[int, int | None]:
    """(extra peak of a forward, bytes of the mask SDPA received) on a one-layer model."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2 * tokens,
    )  # fmt: skip
    config._attn_implementation = "sdpa"
    model: Any = Qwen2ForCausalLM(config)
    model = model.to(device="cuda", dtype=torch.bfloat16).eval()
    assert model.config._attn_implementation == "sdpa"
    seen: list[int | None] = []
    sdpa = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        mask = kwargs.get("attn_mask")
        seen.append(None if mask is None else mask.numel() * mask.element_size())
        return sdpa(*args, **kwargs)

    half = tokens // 2
    positions = torch.cat([torch.arange(half), torch.arange(tokens - half)])[None].cuda()
    ids = torch.randint(0, 256, (1, tokens), device="cuda")
    torch.nn.functional.scaled_dot_product_attention = spy
    try:
        with torch.no_grad():
            peak = extra_peak(lambda: model(input_ids=ids, position_ids=positions, use_cache=False).logits)
    finally:
        torch.nn.functional.scaled_dot_product_attention = sdpa
    return peak, seen[-1] if seen else None


def sdpa_with_bool_mask(tokens: int, heads: int = 2, dim: int = 64) -> int:
    """Extra peak of SDPA with a bool mask over what the same call takes with is_causal (no mask)."""
    q, k, v = (torch.randn(1, heads, tokens, dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(tokens, tokens, dtype=torch.bool, device="cuda").tril()[None, None]
    with torch.no_grad():
        masked = extra_peak(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
        causal = extra_peak(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    return masked - causal


def row_log_softmax(tokens: int, vocab: int) -> int:
    """Extra peak of verl's logprobs_from_logits_v2 (bf16 branch) on one packed row of logits."""
    logits = torch.randn(1, tokens, vocab, device="cuda", dtype=torch.bfloat16)
    labels = torch.randint(0, vocab, (1, tokens), device="cuda")

    def v2():
        rows = []
        for row_logits, row_labels in zip(logits, labels, strict=True):
            row = F.log_softmax(row_logits, dim=-1)
            rows.append(row.gather(dim=-1, index=row_labels.unsqueeze(-1)).squeeze(-1))
        return torch.stack(rows)

    with torch.no_grad():
        return extra_peak(v2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=8192, help="tokens of one packed pass")
    parser.add_argument("--vocab", type=int, default=151936, help="vocabulary (Qwen2.5's by default)")
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("sdpa_memory: no CUDA GPU here", file=sys.stderr)
        return 2
    t, v = args.tokens, args.vocab
    forward_peak, mask_bytes = packed_mask(t)
    bias = sdpa_with_bool_mask(t)
    copy = row_log_softmax(t, v)
    result = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "tokens": t,
        "vocab": v,
        "mask_bytes_sdpa_received": mask_bytes,
        "plan_mask_bytes": t * t,
        "forward_extra_peak_bytes": forward_peak,
        "sdpa_bool_mask_extra_over_causal_bytes": bias,
        "plan_bias_bytes": 2 * t * t,
        "bias_ratio": bias / (2 * t * t),
        "log_softmax_extra_peak_bytes": copy,
        "plan_logits_copy_bytes": 2 * t * v,
        "logits_copy_ratio": copy / (2 * t * v),
    }
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
