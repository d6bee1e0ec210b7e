"""Prefix sharing in an update: a prompt start shared by many decisions runs once.

The decisions of one optimizer step come from a few rollout groups, and every turn of every episode
of a group starts with the same system prompt (instructions, scaffold, task): most of a prompt.
`prefix_groups` finds such shared starts, `SharedPrefix` runs one once with gradients, and each
decision's suffix runs against the prefix's keys/values: in score mode the rest of its prompt, then
its candidates, in packed passes (scoring.score_batch, here with gradients); in generate mode the
rest of its prompt and its response, a micro-batch per pass (`SharedPrefix.sequences`).

Each pass reads detached copies of the prefix's keys/values, so its backward stops there and its
graph is freed before the next pass; the gradient gathered on those copies goes back through the
prefix's own pass once, after the last of its passes (`SharedPrefix.backward`), which recomputes
that pass's activations rather than keeping them through all of the passes (`RECOMPUTE_PREFIX`). As
the loss is a sum over decisions, the total gradient equals running every decision's whole prompt.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pats.backends.local import grpo
from pats.backends.local.scoring import CACHE_ROWS, PrefixStore, score_batch

if TYPE_CHECKING:
    from pats.backends.local.items import TrainItem, Updatable

# Suffix tokens per pass with gradients. Measured on 16 decisions of 318-token prompts (155 shared),
# SmolLM2-135M fp32, 1 thread: 512 tokens (2 decisions) per pass peaks 1.8 GB above the model, like the
# whole-prompt path (2.0 GB); 2048 peaks 4.6 GB and is no faster on a CPU. 256 took the quickstart's
# peak from 2.33 to 1.92 GiB at no cost in time (0.97x, less padding; docs/journal/2026-12-01-peak-memory.md),
# which issue 60's 2.0 GiB target needs. It packs other rows into a pass than 512 did, so bf16 rounds
# differently: runs made before it (Stage 1's and Stage 2's cells, at 512) differ in their last digits
# from a rerun today, not in what they measure.
PASS_TOKENS = 256

# The prefix's pass with gradients keeps no activations through its group's passes but recomputes
# them in `SharedPrefix.backward` (the same gradient). Measured on the quickstart's step-2 batch
# (docs/journal/2026-12-01-peak-memory.md): that held 136-150 MiB (~0.6 MiB a prefix token) under
# every pass of the group, for one more prefix pass per group (+3% FLOP, no measurable time:
# bench/perf/update.py's prefix/prefix-keep). False: keep them (the reference).
RECOMPUTE_PREFIX = True


def prefix_groups(prompts: Sequence[tuple[int, ...]]) -> list[tuple[int, list[int]]]:
    """(prefix length, indices of the prompts that start with it): each prompt in one group.

    The groups minimize the tokens run, a group costing its prefix once plus each prompt's rest.
    That finds the system prompt without knowing the chat template: prompts of one task share it,
    other tasks share only the instructions, and splitting a group further (e.g. two turns with the
    same history) pays only where the extra shared tokens outweigh running the common part again.
    A prefix leaves each prompt at least one token, whose state predicts the first candidate token.
    """

    def common(members: list[int]) -> int:
        lo, hi = min(prompts[i] for i in members), max(prompts[i] for i in members)
        limit = min(len(prompts[i]) for i in members) - 1
        n = 0
        while n < limit and lo[n] == hi[n]:  # the lexicographic extremes differ first where any do
            n += 1
        return n

    def split(members: list[int]) -> tuple[list[tuple[int, list[int]]], int]:
        n = common(members)
        whole = n + sum(len(prompts[i]) - n for i in members)
        children: dict[int, list[int]] = {}
        for i in members:
            children.setdefault(prompts[i][n], []).append(i)
        if len(children) == 1:  # stopped by the one-token limit, not by a difference
            return [(n, members)], whole
        parts = [split(child) for child in children.values()]
        cost = sum(c for _, c in parts)
        if cost < whole:
            return [g for groups, _ in parts for g in groups], cost
        return [(n, members)], whole

    return split(list(range(len(prompts))))[0] if prompts else []


def passes(sizes: Sequence[int], prefix: int) -> list[list[int]]:
    """Decisions (suffix tokens each) in order into passes of at most PASS_TOKENS suffix tokens and
    CACHE_ROWS repeated prefix rows; a decision larger than that gets a pass of its own."""
    out: list[list[int]] = []
    tokens = 0
    for d, size in enumerate(sizes):
        if out and tokens + size <= PASS_TOKENS and (len(out[-1]) + 1) * prefix <= CACHE_ROWS:
            out[-1].append(d)
            tokens += size
        else:
            out.append([d])
            tokens = size
    return out


def right_padded(
    unit: Sequence[TrainItem], start: int, pad_id: int, device: torch.device
) -> tuple[Tensor, Tensor, Tensor]:
    """(ids, attention mask, loss mask), each (B, T - start): the sequences from token `start` on,
    right-padded to the longest."""
    longest = max(len(it.input_ids) for it in unit) - start
    ids = torch.full((len(unit), longest), pad_id, device=device)
    attention = torch.zeros_like(ids)
    loss_mask = torch.zeros_like(ids)
    for i, it in enumerate(unit):
        rest = it.input_ids[start:]
        ids[i, : len(rest)] = torch.tensor(rest, device=device)
        attention[i, : len(rest)] = 1
        loss_mask[i, : len(rest)] = torch.tensor(it.loss_mask[start:], device=device)
    return ids, attention, loss_mask


class SharedPrefix:
    """One prompt prefix's keys/values, computed once (with gradients when enabled), for the passes
    over its decisions' suffixes; `backward` then sends their gradient through the prefix's pass."""

    def __init__(self, policy: Updatable, model, prefix: tuple[int, ...]):
        self.policy, self.model, self.prefix = policy, model, prefix
        self.store = PrefixStore()
        self._graph: list[tuple[Tensor, Tensor]] = []  # (key or value as computed, its detached copy)
        if not prefix:  # nothing shared: the passes run whole prompts
            return
        if not torch.is_grad_enabled():
            self.store.kv[prefix] = self._keys_values()
            return
        computed = self._keys_values(checkpointed=RECOMPUTE_PREFIX)
        # Copies that need a gradient only where the layer's keys/values have one: below the
        # adapted layers (policy.lora.top_layers) nothing flows back, and the passes skip them.
        leaves = [
            (k.detach().requires_grad_(k.requires_grad), v.detach().requires_grad_(v.requires_grad))
            for k, v in computed
        ]
        self.store.kv[prefix] = leaves
        self._graph = [
            (c, leaf)
            for pair, copies in zip(computed, leaves, strict=True)
            for c, leaf in zip(pair, copies, strict=True)
            if c.requires_grad
        ]

    def _keys_values(self, checkpointed: bool = False) -> list[tuple[Tensor, Tensor]]:
        """The prefix's keys/values, per layer (1, h, n, d) each, from one pass; `checkpointed`: its
        activations are not kept for backward but recomputed there (torch's checkpoint, which also
        restores the RNG state, so LoRA dropout draws the same masks)."""

        def run() -> tuple[Tensor, ...]:
            store = PrefixStore()
            with self.policy.autocast_context():
                store.ensure(self.model.get_decoder(), [self.prefix])
            return tuple(t for pair in store.kv[self.prefix] for t in pair)

        flat = checkpoint(run, use_reentrant=False) if checkpointed else run()
        return list(zip(flat[::2], flat[1::2], strict=True))

    def scores(
        self, decisions: Sequence[tuple[tuple[int, ...], tuple[tuple[int, ...], ...]]]
    ) -> list[Tensor]:
        """Candidate scores (K_d,) of each (prompt, candidates) decision, all in one packed pass."""
        n, policy = len(self.prefix), self.policy
        with policy.autocast_context():
            return score_batch(
                self.model,
                self.store,
                [self.prefix] * len(decisions),
                [prompt[n:] for prompt, _ in decisions],
                [candidates for _, candidates in decisions],
                pad_id=policy.pad_id,
                chunk=policy.trainer.logprob_chunk,
                normalization=policy.spec.score_normalization,
                premise=policy.premise_ids,
            )

    def sequences(self, unit: Sequence[TrainItem]) -> tuple[Tensor, Tensor]:
        """(log-probs, mask), each (B, T - n - c), of sequences that start with the prefix (n tokens),
        their rests right-padded in one pass against its keys/values: the whole-sequence values from
        token n + c on, c the rests' shortest prompt part (>= 1: the prefix leaves each prompt a
        token). No token before that is trained, so the LM head runs on the responses only."""
        from transformers import DynamicCache

        policy, n, rows = self.policy, len(self.prefix), len(unit)
        device = policy.device
        ids, attention, loss_mask = right_padded(unit, n, policy.pad_id, device)  # (B, T - n) each
        cache = DynamicCache(config=self.model.config)
        for layer, (keys, values) in enumerate(self.store.kv[self.prefix]):  # (1, h, n, d) each
            cache.update(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1), layer)
        seen = torch.cat([torch.ones((rows, n), dtype=attention.dtype, device=device), attention], dim=1)
        positions = torch.arange(n, n + ids.shape[1], device=device).expand(rows, -1)  # (B, T - n)
        with policy.autocast_context():
            hidden = self.model.get_decoder()(
                input_ids=ids,
                attention_mask=seen,
                position_ids=positions,
                past_key_values=cache,
                use_cache=True,
            ).last_hidden_state  # (B, T - n, H)
            head = self.model.get_output_embeddings()
            cut = min(it.loss_mask[n:].index(1) for it in unit)  # first trained token of any rest
            logp = grpo.hidden_logprobs(
                hidden[:, cut - 1 : -1], ids[:, cut:], head, policy.trainer.logprob_chunk
            )
        return logp.float(), (loss_mask[:, cut:] * attention[:, cut:]).float()

    def backward(self) -> None:
        """The gradient gathered on the copies, back through the prefix's pass (once)."""
        pairs = [(c, leaf.grad) for c, leaf in self._graph if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([c for c, _ in pairs], [g for _, g in pairs])
        self._graph = []
