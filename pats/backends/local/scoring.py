"""Score K candidate continuations of one prompt with the prompt's KV cache shared.

The prompt runs once. Its last hidden state predicts each candidate's first token; the candidates'
own hidden states, from one batched forward over the prompt's cache repeated per candidate, predict
the rest. The repeated cache costs K x P cached rows (SmolLM2-135M: 46 KB per row in fp32), so
without gradients candidates go in passes of at most CACHE_ROWS // P; with gradients (training) all
K run in one pass, as the softmax over candidates couples them.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from pats.backends.local import grpo

CACHE_ROWS = 16384  # prompt-cache rows (candidates x prompt tokens) per pass when scoring


def score_candidates(
    model,
    prompt_ids: Sequence[int],
    candidates: Sequence[Sequence[int]],
    *,
    pad_id: int,
    chunk: int,
    normalization: Literal["mean", "sum"],
) -> Tensor:
    """Sum or mean token log-prob of each candidate after the prompt. (K,)"""
    from transformers import DynamicCache

    if not candidates:
        raise ValueError("no candidate actions to score")
    device = model.get_output_embeddings().weight.device
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    prompt = torch.tensor([list(prompt_ids)], device=device)  # (1, P)
    k, longest = len(candidates), max(len(c) for c in candidates)
    ids = torch.full((k, longest), pad_id, device=device)  # (K, L), right-padded
    mask = torch.zeros((k, longest), dtype=torch.long, device=device)  # (K, L)
    for i, cand in enumerate(candidates):
        ids[i, : len(cand)] = torch.tensor(list(cand), device=device)
        mask[i, : len(cand)] = 1

    cache = DynamicCache(config=model.config)
    last = decoder(input_ids=prompt, past_key_values=cache, use_cache=True).last_hidden_state[:, -1:]
    per_pass = k if torch.is_grad_enabled() else max(1, CACHE_ROWS // prompt.shape[1])
    scores = []
    for start in range(0, k, per_pass):
        n = min(per_pass, k - start)
        # The last pass may reuse the prompt's cache itself; earlier ones need their own copy.
        shared = cache if start + n == k else copy.deepcopy(cache)
        shared.batch_repeat_interleave(n)  # the prompt's keys/values, once per candidate
        part_ids, part_mask = ids[start : start + n], mask[start : start + n]  # (n, L)
        attention = torch.cat([torch.ones_like(prompt).expand(n, -1), part_mask], dim=1)  # (n, P + L)
        hidden = decoder(
            input_ids=part_ids, attention_mask=attention, past_key_values=shared, use_cache=True
        ).last_hidden_state  # (n, L, H)
        # Position j predicts candidate token j: the prompt's last state for j = 0, else the
        # candidate's own state at j - 1.
        hidden = torch.cat([last.expand(n, -1, -1), hidden[:, :-1]], dim=1)  # (n, L, H)
        logprobs = grpo.hidden_logprobs(hidden, part_ids, head, chunk)  # (n, L)
        scores.append(grpo.sequence_score(logprobs, part_mask, normalization))
    return torch.cat(scores)  # (K,)
