"""Score K candidate continuations of one prompt with the prompt's KV cache shared.

The prompt runs once. Its last hidden state predicts each candidate's first token; the candidates'
own hidden states, from one batched forward over the prompt's cache repeated per candidate, predict
the rest. The repeated cache costs K x P cached rows (SmolLM2-135M: 46 KB per row in fp32), so
without gradients candidates go in passes of at most CACHE_ROWS // P; with gradients (training) all
K run in one pass, as the softmax over candidates couples them.

`score_batch` does the same for all live episodes of a rollout turn (no gradients there): each
episode's system prompt comes from a `PrefixStore` (computed once per rollout), and the episodes'
remaining prompts and candidates are packed into the rows of one forward pass, kept apart by an
attention mask. At batch 1 the matmuls are too small to use a CPU well; packed, they have
thousands of rows. The update runs it with gradients too, one shared prefix at a time, its keys
and values detached copies that collect their gradient (sharing.py).

How a candidate's token log-probs become its score is `policy.score_normalization` (`rule_scores`):
- mean / sum: the mean or sum over all its tokens (the end token included);
- distinct_mean: the mean over its distinguishing tokens only, those after the longest token prefix
  it shares with another candidate of the same decision ("take" in "take apple" / "take pear"), so
  what the context adds to the 1-3 tokens that tell the actions apart is not divided by the rest;
- pmi: the sum minus the same action's sum after a neutral premise that holds only the decision's
  list of actions (`premise(candidates)`: LocalPolicy.premise_ids, a chat whose one user message is
  the turn's last line, "Admissible actions: ..."), the domain-conditional PMI of Holtzman et al.
  2021, "Surface Form Competition": what an action gains from being listed, or from its own short
  and common words, cancels; what the rest of the prompt (task, observation, history, guidance) adds
  remains. The premises run in the same packed pass as the decisions, once per distinct set of
  actions, and without gradients their scores are kept in the `PrefixStore` for the rollout's later
  turns (they depend only on the weights and the set). With gradients (the update) they are
  recomputed and differentiated too: the trained distribution is the one actions are drawn from.

Length (over 450 lines, on purpose): the packed pass, its attention mask, the prefix store and
the scoring rules must agree token for token (tests/test_scoring_rules.py, test_rollout_batching.py),
so they stay in one file.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import torch
from torch import Tensor

from pats.backends.local import attention, grpo
from pats.errors import BackendError

CACHE_ROWS = 16384  # prompt-cache rows (candidates x prompt tokens) per pass when scoring
Normalization = Literal["mean", "sum", "distinct_mean", "pmi"]  # policy.score_normalization
Premise = Callable[[Sequence[Sequence[int]]], Sequence[int]]  # a decision's candidates -> pmi's premise ids


def distinct_starts(candidates: Sequence[Sequence[int]]) -> list[int]:
    """Per candidate, the index of its first distinguishing token: the length of the longest token
    prefix it shares with any other candidate, at most its length - 1 (a duplicate keeps its last
    token). The longest shared prefix is with a neighbour in sorted order, so one sort finds all."""
    order = sorted(range(len(candidates)), key=lambda i: tuple(candidates[i]))
    shared = [0] * len(candidates)
    for a, b in zip(order, order[1:], strict=False):
        x, y = candidates[a], candidates[b]
        n = 0
        while n < min(len(x), len(y)) and x[n] == y[n]:
            n += 1
        shared[a], shared[b] = max(shared[a], n), max(shared[b], n)
    return [min(n, len(c) - 1) for n, c in zip(shared, candidates, strict=True)]


def rule_scores(
    token_logprobs: Tensor,
    mask: Tensor,
    candidates: Sequence[Sequence[int]],
    normalization: Normalization,
    neutral: Tensor | None = None,
) -> Tensor:
    """Scores of one decision's candidates from their token log-probs (K, L), left-aligned with
    `mask` (K, L), under a `policy.score_normalization` rule (module docstring); `neutral` (K,): the
    candidates' summed log-probs after the neutral premise, for pmi. (K,)"""
    if normalization in ("mean", "sum"):
        return grpo.sequence_score(token_logprobs, mask, normalization)
    if normalization == "distinct_mean":
        starts = torch.tensor(distinct_starts(candidates), device=mask.device)  # (K,)
        columns = torch.arange(mask.shape[1], device=mask.device)  # (L,)
        return grpo.sequence_score(token_logprobs, mask * (columns[None] >= starts[:, None]), "mean")
    if normalization == "pmi":
        if neutral is None:
            raise ValueError("pmi scoring needs the candidates' scores after the neutral premise")
        return grpo.sequence_score(token_logprobs, mask, "sum") - neutral
    raise ValueError(
        f"unknown score normalization '{normalization}'; known: {', '.join(get_args(Normalization))}"
    )


def _check_premise(premise: Premise | None) -> Premise:
    """The premise pmi scores against; without one pmi cannot score."""
    if premise is None:
        raise ValueError("pmi scoring needs the neutral premise of a decision (LocalPolicy.premise_ids)")
    return premise


def score_candidates(
    model,
    prompt_ids: Sequence[int],
    candidates: Sequence[Sequence[int]],
    *,
    pad_id: int,
    chunk: int,
    normalization: Normalization,
    premise: Premise | None = None,
) -> Tensor:
    """Score of each candidate after the prompt under the `normalization` rule (`rule_scores`);
    pmi also scores them after `premise(candidates)`. (K,)"""
    table, mask = candidate_logprobs(model, prompt_ids, candidates, pad_id=pad_id, chunk=chunk)
    neutral = None
    if normalization == "pmi":
        neutral = score_candidates(
            model,
            _check_premise(premise)(candidates),
            candidates,
            pad_id=pad_id,
            chunk=chunk,
            normalization="sum",
        )
    return rule_scores(table, mask, candidates, normalization, neutral)


def candidate_logprobs(
    model, prompt_ids: Sequence[int], candidates: Sequence[Sequence[int]], *, pad_id: int, chunk: int
) -> tuple[Tensor, Tensor]:
    """(token log-probs, mask), each (K, L): every candidate's tokens after the prompt, left-aligned,
    the mask 1 on real tokens. What every scoring rule is computed from (`rule_scores`)."""
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
    tables = []
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
        tables.append(grpo.hidden_logprobs(hidden, part_ids, head, chunk))  # (n, L)
    return torch.cat(tables), mask  # (K, L) each


# -- batched scoring for rollouts ---------------------------------------------------------------

BATCH_TOKENS = 8192  # tokens (rows x row width) per forward pass when scoring a batch
PAD, PROMPT = -1, 0  # segment ids of a row's tokens; candidate k of an episode is segment k + 1


def _row_keys_values(layer: object, i: int, n: int) -> tuple[Tensor, Tensor]:
    """Copies of row i's first n positions of one cache layer's keys and values, (1, h, n, d) each."""
    from transformers.cache_utils import CacheLayerMixin

    if not isinstance(layer, CacheLayerMixin) or layer.keys is None or layer.values is None:
        raise BackendError(
            f"shared prompt prefixes need attention keys/values; this model's {type(layer).__name__} has none"
        )
    return layer.keys[i : i + 1, :, :n].clone(), layer.values[i : i + 1, :, :n].clone()


class PrefixStore:
    """Keys and values of shared prompt prefixes (the system message: instructions, scaffold, task),
    each computed once and reused by every episode and turn that starts with it.

    Valid for one set of weights and one autocast setting: make a new store for every rollout. Only
    the prefixes asked for by the latest `ensure` are kept, so an episode's prefix is dropped once
    the episode has ended. `neutral` keeps, per set of candidate actions, their summed log-probs after
    its neutral premise (pmi scoring), computed without gradients, for the rest of the rollout.
    """

    def __init__(self) -> None:
        self.kv: dict[tuple[int, ...], list[tuple[Tensor, Tensor]]] = {}  # ids -> per layer (1, h, S, d)
        self.neutral: dict[tuple[tuple[int, ...], ...], Tensor] = {}  # candidates -> (K,) after the premise

    def ensure(self, decoder, prefixes: Sequence[tuple[int, ...]]) -> None:
        """Compute the prefixes not stored yet in one batched pass (right padding); forget the rest."""
        from transformers import DynamicCache

        wanted = set(prefixes)
        self.kv = {p: kv for p, kv in self.kv.items() if p in wanted}
        missing = sorted(p for p in wanted if p and p not in self.kv)
        if not missing:
            return
        device = decoder.get_input_embeddings().weight.device
        longest = max(len(p) for p in missing)
        ids = torch.zeros((len(missing), longest), dtype=torch.long, device=device)  # (n, S)
        mask = torch.zeros_like(ids)  # (n, S)
        for i, p in enumerate(missing):
            ids[i, : len(p)] = torch.tensor(p, device=device)
            mask[i, : len(p)] = 1
        cache = DynamicCache(config=decoder.config)
        decoder(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        for i, p in enumerate(missing):
            self.kv[p] = [_row_keys_values(layer, i, len(p)) for layer in cache.layers]

    def stack(self, decoder, rows: Sequence[Sequence[tuple[int, ...]]]):
        """(cache, spans): per row, its distinct prefixes one after another, rows right-padded to the
        longest; spans[r][prefix] = (first, end) key column of that prefix in row r. Keys were
        rotated at their own positions, so where they sit in the cache does not matter."""
        from transformers import DynamicCache

        spans: list[dict[tuple[int, ...], tuple[int, int]]] = []
        for prefixes in rows:
            at, span = 0, {}
            for p in dict.fromkeys(p for p in prefixes if p):  # distinct, in order
                span[p] = (at, at + len(p))
                at += len(p)
            spans.append(span)
        width = max((end for span in spans for _, end in span.values()), default=0)
        if width == 0:
            return None, spans
        some = next(iter(s for span in spans for s in span))
        cache = DynamicCache(config=decoder.config)
        for layer in range(len(self.kv[some])):
            pair = []
            for part in (0, 1):  # keys, values
                first = self.kv[some][layer][part]  # (1, h, S, d)
                block = first.new_zeros((len(rows), first.shape[1], width, first.shape[3]))  # (R, h, S, d)
                for r, span in enumerate(spans):
                    for p, (start, end) in span.items():
                        block[r, :, start:end] = self.kv[p][layer][part][0]
                pair.append(block)
            cache.update(pair[0], pair[1], layer)
        return cache, spans


def supports_batching(model) -> bool:
    """Batched scoring builds its own attention masks, which know nothing of sliding windows."""
    config = model.config.get_text_config()
    return getattr(config, "sliding_window", None) is None and "sliding_attention" not in (
        getattr(config, "layer_types", None) or ()
    )


def score_batch(
    model,
    store: PrefixStore,
    prefixes: Sequence[Sequence[int]],
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
    chunk: int,
    normalization: Normalization,
    premise: Premise | None = None,
) -> list[Tensor]:
    """`score_candidates` for many prompts at once: one score vector (K_b,) each.

    Prompt b is prefixes[b] + prompts[b]; the prefix's keys/values come from `store` (computed
    once), the rest runs here. An episode's tokens are the rest of its prompt followed by all of
    its candidates one after another, and several episodes are packed into one row. An attention
    mask lets every token see its own prefix, its own prompt and its own candidate's earlier tokens
    only, and position ids continue the prompt, so each candidate is scored as if it directly
    followed its prompt. One forward pass thus scores every candidate of many episodes, with
    thousands of rows per matmul instead of one prompt's worth, and little padding.
    pmi adds each distinct set of candidates after its premise to the same pass (`_with_neutral`).
    """
    if any(not c for c in candidates):
        raise ValueError("no candidate actions to score")
    if any(not r for r in prompts):
        raise ValueError("each prompt needs a token after its prefix to predict the first candidate token")
    if normalization == "pmi":
        return _with_neutral(
            model, store, prefixes, prompts, candidates, _check_premise(premise), pad_id=pad_id, chunk=chunk
        )
    tables = batch_logprobs(model, store, prefixes, prompts, candidates, pad_id=pad_id, chunk=chunk)
    return [rule_scores(t, m, c, normalization) for (t, m), c in zip(tables, candidates, strict=True)]


def batch_logprobs(
    model,
    store: PrefixStore,
    prefixes: Sequence[Sequence[int]],
    prompts: Sequence[Sequence[int]],
    candidates: Sequence[Sequence[Sequence[int]]],
    *,
    pad_id: int,
    chunk: int,
) -> list[tuple[Tensor, Tensor]]:
    """Per decision, its candidates' (token log-probs, mask), each (K_b, L_b) left-aligned: what
    `score_batch` computes every rule from (bench/studies/ceiling.py computes them all from one pass)."""
    # Identical decisions (a group's episodes all start from the same prompt) are scored once.
    decisions = [
        (tuple(h), tuple(r), tuple(map(tuple, c)))
        for h, r, c in zip(prefixes, prompts, candidates, strict=True)
    ]
    unique = list(dict.fromkeys(decisions))
    if len(unique) < len(decisions):
        once = batch_logprobs(
            model,
            store,
            [h for h, _, _ in unique],
            [r for _, r, _ in unique],
            [c for _, _, c in unique],
            pad_id=pad_id,
            chunk=chunk,
        )
        of = dict(zip(unique, once, strict=True))
        return [of[d] for d in decisions]
    decoder = model.get_decoder()
    keys = [tuple(p) for p in prefixes]
    store.ensure(decoder, keys)
    lengths = list(map(packed_length, prompts, candidates))
    width = max(lengths)
    rows = pack_rows(lengths, keys, width)
    tables: dict[int, tuple[Tensor, Tensor]] = {}
    per_pass = max(1, BATCH_TOKENS // width)
    for start in range(0, len(rows), per_pass):
        part = rows[start : start + per_pass]
        cache, spans = store.stack(decoder, [[keys[e] for e in row] for row in part])
        tables |= _score_pass(
            model, cache, spans, part, keys, prompts, candidates, width, pad_id=pad_id, chunk=chunk
        )
    return [tables[e] for e in range(len(prompts))]


def _with_neutral(
    model, store, prefixes, prompts, candidates, premise: Premise, *, pad_id, chunk
) -> list[Tensor]:
    """pmi scores of `score_batch`: each decision's summed log-probs minus the same candidates' sums
    after their premise. Each distinct set of candidates not in `store.neutral` is scored after its
    premise as an extra decision of the same packed pass (no shared prefix); without gradients its
    scores are kept there for later turns."""
    sets = [tuple(map(tuple, cands)) for cands in candidates]
    known = store.neutral if not torch.is_grad_enabled() else {}
    missing = [c for c in dict.fromkeys(sets) if c not in known]
    scores = score_batch(
        model,
        store,
        [*prefixes, *[()] * len(missing)],
        [*prompts, *[premise(c) for c in missing]],
        [*candidates, *missing],
        pad_id=pad_id,
        chunk=chunk,
        normalization="sum",
    )
    neutral = dict(known) | dict(zip(missing, scores[len(prompts) :], strict=True))
    if not torch.is_grad_enabled():
        store.neutral |= {c: neutral[c] for c in missing}
    return [s - neutral[c] for s, c in zip(scores[: len(prompts)], sets, strict=True)]


def packed_length(rest: Sequence[int], candidates: Sequence[Sequence[int]]) -> int:
    """Tokens an episode takes in a row of `score_batch`: the rest of its prompt (after its prefix),
    then every candidate. With `pack_rows`, what a caller (bench/perf/rollout.py) needs to count the rows
    and padding `score_batch` computes."""
    return len(rest) + sum(len(c) for c in candidates)


def pack_rows(lengths: Sequence[int], prefixes: Sequence[tuple[int, ...]], width: int) -> list[list[int]]:
    """How `score_batch` packs episodes (their `packed_length`s) into rows of `width` tokens: longest
    first, each into the first row with room, rows that already hold its prefix tried first (fewer
    prefixes per row, fewer keys to attend to). Each row lists its episodes' indices."""
    rows: list[list[int]] = []
    room: list[int] = []
    for e in sorted(range(len(lengths)), key=lambda e: -lengths[e]):
        order = sorted(range(len(rows)), key=lambda r: prefixes[e] not in {prefixes[x] for x in rows[r]})
        fits = [r for r in order if room[r] >= lengths[e]]
        if fits:
            rows[fits[0]].append(e)
            room[fits[0]] -= lengths[e]
        else:
            rows.append([e])
            room.append(width - lengths[e])
    return rows


def _score_pass(model, cache, spans, rows, prefixes, prompts, candidates, width, *, pad_id, chunk):
    """One forward pass over packed rows; see `score_batch`. {episode: (token log-probs, mask) (K_e, L)}"""
    decoder, head = model.get_decoder(), model.get_output_embeddings()
    device = head.weight.device
    shape = (len(rows), width)
    ids = torch.full(shape, pad_id, dtype=torch.long)  # (R, W)
    positions = torch.zeros(shape, dtype=torch.long)  # (R, W)
    episode = torch.full(shape, PAD, dtype=torch.long)  # (R, W): which episode a token belongs to
    segment = torch.full(shape, PAD, dtype=torch.long)  # (R, W): its prompt or one of its candidates
    first = torch.zeros(shape, dtype=torch.long)  # (R, W): key columns [first, end) hold its prefix
    end = torch.zeros(shape, dtype=torch.long)  # (R, W)
    # Per candidate token: (row, column of the state that predicts it, token, candidate, index in it).
    at_row, at_col, targets, owner, index = [], [], [], [], []
    order = []  # (episode, its number of candidates), in the order their candidates are numbered
    numbered = 0  # candidates numbered so far
    for r, row in enumerate(rows):
        col = 0
        for e in row:
            p, rest = len(prefixes[e]), prompts[e]
            span = spans[r].get(prefixes[e], (0, 0))
            n = packed_length(rest, candidates[e])
            episode[r, col : col + n] = e
            first[r, col : col + n], end[r, col : col + n] = span
            ids[r, col : col + len(rest)] = torch.tensor(list(rest))
            positions[r, col : col + len(rest)] = torch.arange(p, p + len(rest))
            segment[r, col : col + len(rest)] = PROMPT
            last, col = col + len(rest) - 1, col + len(rest)  # the prompt's last token predicts token 0
            for k, cand in enumerate(candidates[e]):
                ids[r, col : col + len(cand)] = torch.tensor(list(cand))
                positions[r, col : col + len(cand)] = torch.arange(p + len(rest), p + len(rest) + len(cand))
                segment[r, col : col + len(cand)] = k + 1
                for j, token in enumerate(cand):  # token j is predicted by the state before it
                    at_row.append(r)
                    at_col.append(last if j == 0 else col + j - 1)
                    targets.append(token)
                    owner.append(numbered + k)
                    index.append(j)
                col += len(cand)
            order.append((e, len(candidates[e])))
            numbered += len(candidates[e])

    seen = torch.arange(width)
    causal = seen[None, :] <= seen[:, None]  # (W, W): key j <= query i
    same = (episode[:, None, :] == episode[:, :, None]) & (episode[:, None, :] != PAD)  # (R, W, W)
    visible = (segment[:, None, :] == PROMPT) | (segment[:, None, :] == segment[:, :, None])
    allowed = (causal & same & visible) | torch.eye(width, dtype=torch.bool)  # padding sees itself
    if cache is not None:
        column = torch.arange(cache.get_seq_length())  # (S,)
        on_prefix = (first[..., None] <= column) & (column < end[..., None])  # (R, W, S)
        allowed = torch.cat([on_prefix, allowed], dim=2)  # (R, W, S + W)
    mask = _attention_mask(model, allowed[:, None].to(device))  # (R, 1, W, S + W)

    hidden = decoder(
        input_ids=ids.to(device),
        attention_mask=mask,
        position_ids=positions.to(device),
        past_key_values=cache,
        use_cache=cache is not None,
    ).last_hidden_state  # (R, W, H)
    picked = hidden[torch.tensor(at_row, device=device), torch.tensor(at_col, device=device)]  # (M, H)
    target_ids = torch.tensor(targets, device=device)  # (M,)
    logprobs = grpo.hidden_logprobs(picked[None], target_ids[None], head, chunk)[0]  # (M,)
    where = (torch.tensor(owner, device=device), torch.tensor(index, device=device))
    table = torch.zeros((numbered, max(index) + 1), dtype=logprobs.dtype, device=device)
    table[where] = logprobs  # (C, L): each candidate's token log-probs, left-aligned
    filled = torch.zeros_like(table, dtype=torch.long)  # (C, L)
    filled[where] = 1
    out, at = {}, 0
    for e, count in order:  # each episode's candidates are rows [at, at + count) of the table
        out[e] = (table[at : at + count], filled[at : at + count])
        at += count
    return out


def _attention_mask(model, allowed: Tensor) -> Tensor:
    """A boolean mask (True = attend) for SDPA; an additive float mask for eager attention."""
    if attention.takes_boolean_mask(model):
        return allowed
    dtype = model.get_output_embeddings().weight.dtype
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )
