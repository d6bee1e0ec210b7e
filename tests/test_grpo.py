"""GRPO pieces on small tensors, checked against hand-computed numbers."""

from __future__ import annotations

import math

import pytest
import torch

from pats.backends.local import grpo


def test_advantages_hand_cases():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])  # mean 0.5, population std 0.5
    assert torch.allclose(
        grpo.group_advantages(rewards, True), torch.tensor([1.0, -1, -1, 1]).double(), atol=1e-5
    )
    assert torch.equal(grpo.group_advantages(rewards, False), torch.tensor([0.5, -0.5, -0.5, 0.5]).double())
    # Population std of [3, 0, 0] is sqrt(2); sample std would give a different answer.
    adv = grpo.group_advantages(torch.tensor([3.0, 0.0, 0.0]), True)
    assert torch.allclose(adv, torch.tensor([2.0, -1, -1]).double() / math.sqrt(2), atol=1e-5)


def test_eps_keeps_a_tiny_spread_from_becoming_a_full_advantage():
    # rewards 0 and 1e-6: centered -+5e-7, population std 5e-7, plus eps 1e-6 -> -+1/3 (not -+1)
    adv = grpo.group_advantages(torch.tensor([0.0, 1e-6], dtype=torch.float64), True)
    assert torch.allclose(adv, torch.tensor([-1.0, 1.0]).double() / 3, rtol=1e-6)


@pytest.mark.parametrize("value", [0.0, 1.0, 0.1])
def test_equal_rewards_give_exactly_zero(value):
    adv = grpo.group_advantages(torch.full((3,), value), normalize_std=True)
    assert torch.equal(adv, torch.zeros(3).double())


def _loss(logp_new, logp_old=None, adv=(1.0,), mask=None, clip=(0.2, 0.2), weights=None):
    logp_old = torch.zeros_like(logp_new) if logp_old is None else logp_old
    mask = torch.ones_like(logp_new) if mask is None else mask
    weights = None if weights is None else torch.tensor(weights)
    return grpo.ppo_clip_loss(logp_new, logp_old, torch.tensor(adv), mask, *clip, weights=weights)


def test_masked_tokens_get_exactly_zero_gradient():
    logp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.2, -30.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0]])
    loss, _ = _loss(logp, logp.detach() + 0.05, adv=(1.0, -2.0), mask=mask)
    loss.backward()
    assert torch.equal(logp.grad[mask == 0], torch.zeros(3))
    assert (logp.grad[mask == 1] != 0).all()


def test_clipping_cuts_the_gradient_only_outside_the_trust_region():
    # Positive advantage: ratio 1.5 > 1 + 0.2 is clipped (no gradient); ratio 1.1 is not, and its
    # gradient is d(-ratio * A)/d logp = -ratio * A.
    outside = torch.tensor([[math.log(1.5)]], requires_grad=True)
    _, stats = _loss(outside)
    _loss(outside)[0].backward()
    assert outside.grad.item() == 0.0 and stats["clip_frac"].item() == 1.0
    # the clipped term scales with the advantage: A = 2 gives -min(1.5 * 2, 1.2 * 2) = -2.4
    assert _loss(outside.detach(), adv=(2.0,))[0].item() == pytest.approx(-2.4)
    inside = torch.tensor([[math.log(1.1)]], requires_grad=True)
    _loss(inside)[0].backward()
    assert inside.grad.item() == pytest.approx(-1.1)
    # Negative advantage: the clip binds below (ratio 0.5 < 0.8), not above (ratio 1.5 keeps its gradient).
    low = torch.tensor([[math.log(0.5)]], requires_grad=True)
    _loss(low, adv=(-1.0,))[0].backward()
    assert low.grad.item() == 0.0
    high = torch.tensor([[math.log(1.5)]], requires_grad=True)
    _loss(high, adv=(-1.0,))[0].backward()
    assert high.grad.item() == pytest.approx(1.5)


def test_loss_is_a_mean_over_sequences_not_tokens():
    # Ratio 1 everywhere: loss = -mean over sequences of A. Sequence 1 has 1 token (A = 1), sequence 2
    # has 3 tokens (A = 0): per-sequence mean -0.5; a token mean would give -0.25.
    logp = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1]])
    loss, stats = _loss(logp, adv=(1.0, 0.0), mask=mask)
    assert loss.item() == pytest.approx(-0.5)
    assert stats["ratio_mean"].item() == pytest.approx(1.0) and stats["clip_frac"].item() == 0.0
    weighted, _ = _loss(logp, adv=(1.0, 0.0), mask=mask, weights=(3.0, 1.0))
    assert weighted.item() == pytest.approx(-0.75)


def test_kl_penalty_k3():
    logp = torch.tensor([[-1.0, -0.5, -3.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert grpo.kl_penalty(logp, logp.clone(), mask).item() == 0.0
    ref = torch.tensor([[-2.0, -0.5, 50.0]])  # the masked token's huge difference must not count
    # token 1: delta = ref - logp = -1 -> e^-1 + 1 - 1; token 2: delta 0 -> 0; mean over 2 tokens.
    expected = (math.exp(-1.0) + 1.0 - 1.0) / 2
    assert grpo.kl_penalty(logp, ref, mask).item() == pytest.approx(expected)
    assert grpo.kl_penalty(logp, logp + 0.3, mask).item() > 0


def test_sequence_score_mean_and_sum():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-4.0, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert torch.equal(grpo.sequence_score(logprobs, mask, "sum"), torch.tensor([-6.0, -4.0]))
    assert torch.equal(grpo.sequence_score(logprobs, mask, "mean"), torch.tensor([-2.0, -4.0]))


def test_action_distribution():
    probs = grpo.action_distribution(torch.tensor([0.0, math.log(3.0)]), temperature=1.0)
    assert torch.allclose(probs, torch.tensor([0.25, 0.75]))
    probs = grpo.action_distribution(torch.tensor([-3.0, -1.0, -7.5, 0.2]), temperature=0.7)
    assert probs.sum().item() == pytest.approx(1.0)
    flat = grpo.action_distribution(torch.tensor([0.0, math.log(3.0)]), temperature=1e6)
    assert torch.allclose(flat, torch.tensor([0.5, 0.5]), atol=1e-5)


def test_chunked_logprobs_match_full_logits_with_gradients():
    torch.manual_seed(0)
    head = torch.nn.Linear(8, 50, bias=False)
    hidden = torch.randn(2, 7, 8, requires_grad=True)  # (B, N, H)
    targets = torch.randint(0, 50, (2, 7))
    full = torch.gather(head(hidden).log_softmax(-1), -1, targets.unsqueeze(-1)).squeeze(-1)
    (grad_full,) = torch.autograd.grad(full.sum(), hidden)
    chunked = grpo.hidden_logprobs(hidden, targets, head, chunk=3)  # 3 + 3 + 1 positions
    (grad_chunked,) = torch.autograd.grad(chunked.sum(), hidden)
    assert torch.allclose(full, chunked, atol=1e-6)
    assert torch.allclose(grad_full, grad_chunked, atol=1e-6)


def test_token_logprobs_on_a_tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, tie_word_embeddings=True,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 64, (2, 9))
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(input_ids=ids).logits.log_softmax(-1)  # (B, T, V)
        expected = torch.gather(logits[:, :-1], -1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
        got = grpo.token_logprobs(model, ids, mask, chunk=4)
    assert got.shape == (2, 8)
    assert torch.allclose(got, expected, atol=1e-5)


def test_chunks_cover_every_position_whatever_the_hidden_size():
    # N = 7 positions over H = 4 hidden units (fewer units than positions), chunks of 3: 3 + 3 + 1.
    torch.manual_seed(0)
    head = torch.nn.Linear(4, 20, bias=False)
    hidden, targets = torch.randn(2, 7, 4), torch.randint(0, 20, (2, 7))
    full = torch.gather(head(hidden).log_softmax(-1), -1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        chunked = grpo.hidden_logprobs(hidden, targets, head, chunk=3)
    assert chunked.shape == (2, 7) and torch.allclose(full, chunked, atol=1e-6)


def test_chunks_are_checkpointed_only_when_a_gradient_will_flow(monkeypatch):
    calls = []

    def counting(fn, *args, **kwargs):
        calls.append(1)
        return fn(*args)

    monkeypatch.setattr(grpo, "checkpoint", counting)
    head = torch.nn.Linear(4, 20, bias=False)
    hidden, targets = torch.randn(1, 5, 4, requires_grad=True), torch.randint(0, 20, (1, 5))
    grpo.hidden_logprobs(hidden, targets, head, chunk=2)
    assert len(calls) == 3, "with gradients on: each of the 3 chunks"
    with torch.no_grad():
        grpo.hidden_logprobs(hidden, targets, head, chunk=2)
    grpo.hidden_logprobs(hidden.detach(), targets, head, chunk=2)
    assert len(calls) == 3, "no gradient to flow (no_grad, or hidden states that need none): no checkpoint"


def test_only_a_bias_free_linear_head_is_accepted():
    hidden, targets = torch.randn(1, 2, 4), torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError) as info:
        grpo.hidden_logprobs(hidden, targets, torch.nn.Linear(4, 20, bias=True), chunk=2)
    assert str(info.value) == "the LM head has a bias; hidden_logprobs supports bias-free heads only"

    class NoTensor(torch.nn.Module):  # a head whose `weight` is a module, not a tensor
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Linear(4, 20, bias=False)

    with pytest.raises(ValueError) as info:
        grpo.hidden_logprobs(hidden, targets, NoTensor(), chunk=2)
    assert str(info.value) == "the LM head has no weight tensor; hidden_logprobs supports linear heads only"


def test_the_update_stats_count_unmasked_tokens_only():
    # Token 1: ratio 1.5 (clipped at A = 1); token 2: ratio 1 (not clipped); token 3 masked, ratio e^5.
    logp = torch.tensor([[math.log(1.5), 0.0, 5.0]])
    _, stats = _loss(logp, mask=torch.tensor([[1.0, 1.0, 0.0]]))
    assert stats["clip_frac"].item() == pytest.approx(0.5)
    assert stats["ratio_mean"].item() == pytest.approx(1.25)
    # k3 of old vs new per token: ratio - 1 - log(ratio): 0.5 - log 1.5 and 0, over 2 tokens
    assert stats["approx_kl"].item() == pytest.approx((0.5 - math.log(1.5)) / 2)


def test_a_sequence_without_tokens_adds_nothing_and_no_nan():
    logp = torch.zeros(2, 2)
    loss, stats = _loss(logp, adv=(1.0, 1.0), mask=torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    assert loss.item() == pytest.approx(-0.5), "the empty sequence counts 0, the other -1, over 2"
    empty, stats = _loss(logp, adv=(1.0, 1.0), mask=torch.zeros(2, 2))
    assert empty.item() == 0.0 and all(v.item() == 0.0 for k, v in stats.items() if k != "ratio_mean")
    assert grpo.kl_penalty(logp, logp + 1.0, torch.zeros(2, 2)).item() == 0.0
    assert torch.equal(grpo.sequence_score(logp, torch.zeros(2, 2), "mean"), torch.zeros(2))


def test_kl_penalty_clamps_the_log_ratio_at_20():
    logp, mask = torch.zeros(1, 1, dtype=torch.float64), torch.ones(1, 1)
    at = grpo.kl_penalty(logp, logp + 20.0, mask).item()
    assert grpo.kl_penalty(logp, logp + 50.0, mask).item() == at == pytest.approx(math.exp(20) - 21)
    assert grpo.kl_penalty(logp, logp - 50.0, mask).item() == pytest.approx(math.exp(-20) + 19)


def test_an_unknown_score_normalization_names_the_known_ones():
    with pytest.raises(ValueError) as info:
        grpo.sequence_score(torch.zeros(1, 2), torch.ones(1, 2), "max")  # type: ignore[arg-type]
    assert str(info.value) == "unknown score normalization 'max'; known: mean, sum"
