"""The score-mode rules (`policy.score_normalization`: mean, sum, distinct_mean, pmi): each on crafted
token log-probs where the rules choose different actions, then on a tiny random Llama that the packed
rollout path (`score_batch`, with its neutral-premise cache) and the update's path with gradients give
the scores of the one-prompt path (`score_candidates`)."""

from __future__ import annotations

import pytest
import torch

from pats.backends.local import scoring
from pats.backends.local.scoring import distinct_starts, rule_scores


def table(rows: list[list[float]]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log-probs, mask) (K, L) of candidates given as their token log-probs, left-aligned."""
    longest = max(map(len, rows))
    logprobs = torch.zeros((len(rows), longest))
    mask = torch.zeros((len(rows), longest), dtype=torch.long)
    for i, row in enumerate(rows):
        logprobs[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    return logprobs, mask


def choice(rows, candidates, rule, neutral=None) -> int:
    return int(rule_scores(*table(rows), candidates, rule, neutral).argmax())


def test_distinguishing_tokens_start_after_the_longest_prefix_shared_with_another_action():
    take_apple, take_pear, take_apple_from, look = (1, 2, 9), (1, 3, 9), (1, 2, 4, 9), (6, 9)
    assert distinct_starts([take_apple, take_pear, take_apple_from, look]) == [2, 1, 2, 0]
    assert distinct_starts([look, look]) == [1, 1]  # a duplicate keeps its last token
    assert distinct_starts([look]) == [0]


def test_distinct_mean_does_not_credit_a_likely_shared_prefix():
    # "take apple" and "take pear from table" share a likely "take"; "look" shares nothing. The mean
    # counts "take" in take apple's favour; over the distinguishing tokens "look" is better.
    candidates = [(1, 2, 9), (1, 3, 4, 5, 9), (6, 9)]
    rows = [[-0.01, -1.0, -0.1], [-0.01, -2.0, -0.5, -0.5, -0.1], [-0.8, -0.2]]
    assert choice(rows, candidates, "mean") == 0
    assert choice(rows, candidates, "distinct_mean") == 2
    scores = rule_scores(*table(rows), candidates, "distinct_mean")
    assert scores.tolist() == pytest.approx([-0.55, -0.775, -0.5])


def test_sum_favours_the_short_action_where_the_mean_does_not():
    candidates = [(6, 9), (1, 2, 3, 4, 5, 9)]
    rows = [[-2.0, -0.1], [-0.5] * 6]
    assert choice(rows, candidates, "sum") == 0
    assert choice(rows, candidates, "mean") == 1


def test_pmi_subtracts_what_the_action_is_worth_after_the_neutral_premise():
    # "look" is likely anywhere (-1.0 after the premise), "open fridge" is not (-4.0): the prompt made
    # "open fridge" far more likely than its surface form alone would, and pmi picks it.
    candidates = [(6, 9), (7, 8, 9)]
    rows = [[-1.5, -0.5], [-1.0, -1.0, -1.0]]
    neutral = torch.tensor([-1.0, -4.0])
    assert choice(rows, candidates, "sum") == 0
    assert choice(rows, candidates, "pmi", neutral) == 1
    assert rule_scores(*table(rows), candidates, "pmi", neutral).tolist() == pytest.approx([-1.0, 1.0])
    with pytest.raises(ValueError, match="neutral premise"):
        rule_scores(*table(rows), candidates, "pmi")


# -- on a model: the packed path and the update's path give the one-prompt path's scores ----------


@pytest.fixture(scope="module")
def model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    return LlamaForCausalLM(config).eval()


PREFIXES = [(3, 4, 5, 6), (3, 4, 5, 6), (7, 8)]
PROMPTS = [(10, 11, 12), (13, 14), (15, 16, 17, 18)]
CANDIDATES = [
    [(20, 21, 2), (20, 22, 23, 2), (24, 2)],
    [(20, 21, 2), (25, 2)],
    [(26, 27, 2), (26, 27, 28, 2), (24, 2), (29, 30, 31, 32, 2)],
]


def premise(candidates) -> tuple[int, ...]:
    """A premise that lists the candidates, as LocalPolicy.premise_ids does with their texts."""
    return (40, 41, *(t for c in candidates for t in (*c[:-1], 42)), 43)


PREMISE_CALLS: list[int] = []


def counted(candidates) -> tuple[int, ...]:
    PREMISE_CALLS.append(len(candidates))
    return premise(candidates)


def one_by_one(model, rule):
    return [
        scoring.score_candidates(model, [*h, *r], c, pad_id=0, chunk=8, normalization=rule, premise=premise)
        for h, r, c in zip(PREFIXES, PROMPTS, CANDIDATES, strict=True)
    ]


@pytest.mark.parametrize("rule", ["mean", "sum", "distinct_mean", "pmi"])
def test_packed_scores_equal_one_prompt_scores(model, rule):
    with torch.no_grad():
        expected = one_by_one(model, rule)
        got = scoring.score_batch(
            model, scoring.PrefixStore(), PREFIXES, PROMPTS, CANDIDATES,
            pad_id=0, chunk=8, normalization=rule, premise=premise,
        )  # fmt: skip
    for e, g in zip(expected, got, strict=True):
        assert torch.allclose(e, g, atol=1e-5)


def test_pmi_is_the_sum_minus_the_sum_after_the_premise_and_each_premise_runs_once(model):
    with torch.no_grad():
        sums = [
            scoring.score_candidates(model, [*h, *r], c, pad_id=0, chunk=8, normalization="sum")
            for h, r, c in zip(PREFIXES, PROMPTS, CANDIDATES, strict=True)
        ]
        prior = [
            scoring.score_candidates(model, premise(c), c, pad_id=0, chunk=8, normalization="sum")
            for c in CANDIDATES
        ]
        store = scoring.PrefixStore()
        PREMISE_CALLS.clear()
        twice = [*CANDIDATES, CANDIDATES[0]]  # a group's episodes often share a set of actions
        got = scoring.score_batch(
            model, store, [*PREFIXES, (9,)], [*PROMPTS, (19,)], twice,
            pad_id=0, chunk=8, normalization="pmi", premise=counted,
        )  # fmt: skip
    for s, p, g in zip(sums, prior, got, strict=False):
        assert torch.allclose(s - p, g, atol=1e-5)
    assert sorted(PREMISE_CALLS) == sorted(map(len, CANDIDATES)), "one premise per distinct set"
    assert set(store.neutral) == {tuple(c) for c in CANDIDATES}  # kept for later turns
    # A later turn takes the premise's scores from the store: poisoned there, they show up.
    store.neutral = {tuple(c): torch.zeros(len(c)) for c in CANDIDATES}
    PREMISE_CALLS.clear()
    with torch.no_grad():
        again = scoring.score_batch(
            model, store, PREFIXES, PROMPTS, CANDIDATES,
            pad_id=0, chunk=8, normalization="pmi", premise=counted,
        )  # fmt: skip
    assert PREMISE_CALLS == []
    for s, g in zip(sums, again, strict=True):
        assert torch.allclose(s, g, atol=1e-5)


def test_pmi_with_gradients_differentiates_the_premise_too_and_keeps_nothing(model):
    store = scoring.PrefixStore()
    got = scoring.score_batch(
        model, store, PREFIXES, PROMPTS, CANDIDATES, pad_id=0, chunk=8, normalization="pmi", premise=premise
    )
    with torch.no_grad():
        expected = one_by_one(model, "pmi")
    assert all(torch.allclose(e, g, atol=1e-5) for e, g in zip(expected, got, strict=True))
    assert store.neutral == {}
    # The premise's pass is in the graph: a loss on the neutral-only difference has a gradient.
    (grad,) = torch.autograd.grad(got[0].sum(), model.model.embed_tokens.weight)
    assert grad[40].abs().sum() > 0  # the premise's own tokens were differentiated
    model.zero_grad()


def test_pmi_needs_the_premise(model):
    with pytest.raises(ValueError, match="premise"):
        scoring.score_candidates(model, PROMPTS[0], CANDIDATES[0], pad_id=0, chunk=8, normalization="pmi")


@pytest.mark.parametrize("rule", ["distinct_mean", "pmi"])
def test_a_policy_acts_and_trains_under_the_rule(tiny_model_dir, rule):
    """LocalPolicy end to end on a tiny random Llama with SmolLM2's tokenizer (conftest's
    tiny_model_dir): choose_batch (packed) draws from choose's distribution, and an update (shared
    prefix, with gradients) takes a step."""
    from pats.backends.local import LocalPolicy
    from pats.spec.models import LocalTrainerSpec, PolicySpec

    threads = torch.get_num_threads()
    spec = PolicySpec(model=str(tiny_model_dir), lora=None, action="score", score_normalization=rule)
    policy = LocalPolicy(spec, LocalTrainerSpec(lr=1e-2, threads=1, autocast_bf16=False), seed=0)
    torch.set_num_threads(threads)
    actions = ["take apple", "take pear from table", "look around"]
    premise = policy.tokenizer.decode(policy.premise_ids([policy.action_ids(a) for a in actions]))
    assert "user\nAdmissible actions: take apple, take pear from table, look around<|im_end|>" in premise
    assert premise.endswith("<|im_start|>assistant\n") and "Play." not in premise
    prompts = [policy.chat_split("Play.", "You see an apple."), policy.chat_split("Play.", "A pear.")]
    batched = policy.choose_batch(prompts, [actions, actions[:2]], greedy=True)
    alone = [
        policy.choose([*h, *r], a, greedy=True)
        for (h, r), a in zip(prompts, [actions, actions[:2]], strict=True)
    ]
    for (_, p), (_, q) in zip(batched, alone, strict=True):
        assert torch.allclose(p, q, atol=1e-5)
    items = [
        policy.choice_item([*h, *r], actions, 0, advantage=a)
        for (h, r), a in zip(prompts, [1.0, -1.0], strict=True)
    ]
    assert policy.update(items)["steps"] == 1
