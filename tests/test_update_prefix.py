"""Prefix sharing in the update (`trainer.update_prefix_sharing`) gives the same gradient as running
every decision's whole prompt, for score-mode choices and generate-mode sequences.

Real SmolLM2-135M-Instruct in fp32 with LoRA (B perturbed away from zero, so every adapter matrix
has a gradient and the adapter-off reference differs). Four choices: two decisions of one system
prompt, a second choice of one of them, and a decision of another system prompt. The LoRA gradients
and the loss of one update must match the per-decision path's, with one or several passes per
prefix and with the KL term. The same for four generate-mode sequences (prompt + response).
"""

from __future__ import annotations

import pytest
import torch

from pats.backends.local import LocalPolicy, TrainItem, sharing, training
from pats.spec.models import LocalTrainerSpec, LoraSpec, PolicySpec

pytestmark = pytest.mark.slow

RULES = (
    "You are playing a text-based game. Each turn choose one action that brings you closer to "
    "finishing the task.\nTask: pick up objects, then place them in their usual locations."
)
LAUNDRY_RULES = "You sort laundry. Reply with one action.\n- plan: take the dirty socks, then wash them."
KITCHEN = ["look around", "open fridge", "take red apple", "put red apple in fridge"]
LAUNDRY = ["look around", "move west", "take dirty socks", "open washing machine"]


class Recorder:
    """Stands in for the optimizer: keeps each step's gradients, changes no weight."""

    def __init__(self, params):
        self.params, self.grads = params, []

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def step(self):
        self.grads.append([p.grad.clone() for p in self.params])


def _policy(lora: LoraSpec) -> LocalPolicy:
    trainer = LocalTrainerSpec(threads=1, autocast_bf16=False, max_grad_norm=1e9)
    policy = LocalPolicy(PolicySpec(action="score", lora=lora), trainer, seed=0)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.05)
    return policy


@pytest.fixture(scope="module")
def policy():
    threads = torch.get_num_threads()
    yield _policy(LoraSpec(rank=4, alpha=8))
    torch.set_num_threads(threads)  # the spec's thread count is process-wide


def _items(policy):
    kitchen = policy.chat_ids(RULES, "Observation: You are in the kitchen. You see a fridge and a red apple.")
    hallway = policy.chat_ids(RULES, "Observation: Nothing happens.")
    laundry = policy.chat_ids(LAUNDRY_RULES, "Observation: You are in the laundry room.")
    return [
        policy.choice_item(kitchen, KITCHEN, 2, advantage=1.0, weight=0.5),
        policy.choice_item(hallway, KITCHEN[:2], 0, advantage=-1.0, weight=0.5),
        policy.choice_item(kitchen, KITCHEN, 1, advantage=-0.5, weight=0.25),
        policy.choice_item(laundry, LAUNDRY, 3, advantage=0.7),
    ]


def _sequences(policy):
    kitchen = policy.chat_ids(RULES, "Observation: You are in the kitchen. You see a fridge and a red apple.")
    hallway = policy.chat_ids(RULES, "Observation: Nothing happens.")
    laundry = policy.chat_ids(LAUNDRY_RULES, "Observation: You are in the laundry room.")
    return [
        TrainItem.of(kitchen, policy.action_ids("take red apple"), advantage=1.0, weight=0.5),
        TrainItem.of(hallway, policy.action_ids("look around"), advantage=-1.0, weight=0.5),
        TrainItem.of(kitchen, policy.action_ids("open the fridge, then look"), advantage=-0.5),
        TrainItem.of(laundry, policy.action_ids("take dirty socks"), advantage=0.7, weight=0.25),
    ]


def _update(policy, monkeypatch, sharing_on: bool, kl_coef: float, items=_items, micro_batch=4):
    trainer = policy.trainer.model_copy(
        update={"update_prefix_sharing": sharing_on, "kl_coef": kl_coef, "micro_batch": micro_batch}
    )
    recorder = Recorder(policy.params)
    monkeypatch.setattr(policy, "trainer", trainer)
    monkeypatch.setattr(policy, "optimizer", recorder)
    stats = policy.update(items(policy))
    return stats, recorder.grads[0]


def _assert_same_update(fast, fast_grads, slow, slow_grads, tolerance=5e-5):
    assert fast["steps"] == slow["steps"] == 1
    for key in ("loss", "kl", "grad_norm", "tokens", "items"):
        assert fast[key] == pytest.approx(slow[key], rel=tolerance / 5, abs=1e-6), key
    scale = max(g.abs().max() for g in slow_grads)
    assert all(g.abs().max() > 0 for g in slow_grads)  # every LoRA matrix is trained
    for a, b in zip(fast_grads, slow_grads, strict=True):
        assert (a - b).abs().max() <= tolerance * scale, float((a - b).abs().max() / scale)


def test_the_groups_start_at_the_system_prompt(policy):
    items = _items(policy)
    kitchen, laundry = training.update_groups(items, micro_batch=4, prefix_sharing=True)
    head = policy.chat_split(RULES, "x")[0]
    # The system part, and the opening tokens of the user turn that both user messages share.
    assert list(kitchen.prefix[: len(head)]) == head and len(kitchen.prefix) - len(head) < 8
    assert [len(u) for u in kitchen.units] == [3]  # both kitchen choices and the hallway in one pass
    assert laundry.prefix == items[3].prompt_ids[:-1]  # alone: all but the token before the actions


@pytest.mark.parametrize("kl_coef,pass_tokens", [(0.0, 2048), (0.0, 1), (0.1, 2048)])
def test_prefix_sharing_gives_the_per_decision_gradient(policy, monkeypatch, kl_coef, pass_tokens):
    monkeypatch.setattr(sharing, "PASS_TOKENS", pass_tokens)  # 1: every decision its own pass
    slow, slow_grads = _update(policy, monkeypatch, False, kl_coef)
    fast, fast_grads = _update(policy, monkeypatch, True, kl_coef)
    _assert_same_update(fast, fast_grads, slow, slow_grads)
    assert kl_coef == 0 or fast["kl"] > 1e-4  # the reference really differs


@pytest.mark.parametrize("rule", ["distinct_mean", "pmi"])
def test_prefix_sharing_gives_the_per_decision_gradient_under_each_scoring_rule(policy, monkeypatch, rule):
    """pmi's premises run as extra decisions of the shared passes, with gradients: the same update."""
    monkeypatch.setattr(policy, "spec", policy.spec.model_copy(update={"score_normalization": rule}))
    slow, slow_grads = _update(policy, monkeypatch, False, 0.0)
    fast, fast_grads = _update(policy, monkeypatch, True, 0.0)
    _assert_same_update(fast, fast_grads, slow, slow_grads)


def test_generate_sequences_share_their_system_prompt(policy):
    items = _sequences(policy)
    groups = training.update_groups(items, micro_batch=2, prefix_sharing=True)
    kitchen = next(g for g in groups if items[0] in g.units[0])
    assert list(kitchen.prefix[: len(policy.chat_split(RULES, "x")[0])]) == policy.chat_split(RULES, "x")[0]
    assert [len(u) for u in kitchen.units] == [2, 1]  # three sequences of one system prompt, two per pass
    assert sorted(len(u) for g in groups for u in g.units) == [1, 1, 2]


@pytest.mark.parametrize("kl_coef,micro_batch", [(0.0, 4), (0.0, 1), (0.1, 2)])
def test_prefix_sharing_gives_the_whole_sequence_gradient(policy, monkeypatch, kl_coef, micro_batch):
    slow, slow_grads = _update(policy, monkeypatch, False, kl_coef, _sequences, micro_batch)
    fast, fast_grads = _update(policy, monkeypatch, True, kl_coef, _sequences, micro_batch)
    # fp32: one sequence alone (micro_batch 1) differs by up to ~2e-4 of the largest gradient, as the
    # LM head then runs on its 3 response positions only; in fp64 the two agree to ~1e-15 (below),
    # so that is rounding, not a different gradient.
    _assert_same_update(fast, fast_grads, slow, slow_grads, tolerance=5e-4)
    assert kl_coef == 0 or fast["kl"] > 1e-4


def test_sequence_log_probs_after_a_shared_prefix_are_exact_in_fp64():
    policy = _policy(LoraSpec(rank=4, alpha=8))
    policy.model.double()  # no fp32 rounding: the two computations must agree to ~1e-15

    def gradient(item, prefix):
        for p in policy.params:
            p.grad = None
        shared = sharing.SharedPrefix(policy, policy.model, prefix)
        logp, mask = training.unit_logprobs(policy, policy.model, [item], shared)
        (logp * mask).sum().backward()
        shared.backward()
        return (logp * mask).sum().item(), torch.cat([p.grad.flatten() for p in policy.params])

    for group in training.update_groups(_sequences(policy), micro_batch=1, prefix_sharing=True):
        assert group.prefix
        for (item,) in group.units:
            (whole, g_whole), (fast, g_fast) = gradient(item, ()), gradient(item, group.prefix)
            assert fast == pytest.approx(whole, rel=1e-6)  # log-probs are returned in fp32
            assert (g_fast - g_whole).abs().max() <= 1e-12 * g_whole.abs().max()


def test_adapters_on_the_top_layers_only_get_the_same_gradient(policy, monkeypatch):
    # Below the adapters no gradient flows: the prefix's keys/values there need none.
    top = _policy(LoraSpec(rank=4, alpha=8, top_layers=8))
    (slow, slow_grads), (fast, fast_grads) = (_update(top, monkeypatch, on, 0.0) for on in (False, True))
    assert fast["loss"] == pytest.approx(slow["loss"], rel=1e-5)
    scale = max(g.abs().max() for g in slow_grads)
    for a, b in zip(fast_grads, slow_grads, strict=True):
        assert (a - b).abs().max() <= 5e-5 * scale


def test_prefix_groups_minimize_the_tokens_run():
    system_a, system_b = (1, 2, 3, 4, 5, 6, 7, 8), (1, 2, 3, 9, 9, 9, 9, 9)
    prompts = [system_a + (10, 11), system_a + (12,), system_b + (13, 14), system_a + (10, 11)]
    assert sharing.prefix_groups(prompts) == [(8, [0, 1, 3]), (9, [2])]
    # Two prompts that differ at the end only share everything before it.
    assert sharing.prefix_groups([(1, 2, 3, 4), (1, 2, 3, 5)]) == [(3, [0, 1])]
    assert sharing.prefix_groups([(5,), (5,)]) == [(0, [0, 1])]  # a prompt keeps its last token
    assert sharing.prefix_groups([]) == []


def test_passes_keep_to_the_token_and_cache_budgets(monkeypatch):
    monkeypatch.setattr(sharing, "PASS_TOKENS", 10)
    assert sharing.passes([4, 4, 4, 12, 1], prefix=1) == [[0, 1], [2], [3], [4]]
    monkeypatch.setattr(sharing, "CACHE_ROWS", 20)
    assert sharing.passes([1, 1, 1, 1, 1], prefix=10) == [[0, 1], [2, 3], [4]]


def test_bf16_copies_of_the_frozen_weights_give_the_same_update(policy, monkeypatch):
    # Under autocast the update runs on bf16 copies of the frozen weights, made once (not once per
    # pass): autocast's own cast is the same rounding, so the gradient is the same bit for bit.
    from contextlib import nullcontext

    monkeypatch.setattr(policy, "autocast", True)
    copied, copied_grads = _update(policy, monkeypatch, True, 0.0)
    monkeypatch.setattr(policy, "bf16_weights", nullcontext)
    cast, cast_grads = _update(policy, monkeypatch, True, 0.0)
    assert copied["loss"] == cast["loss"] and copied["grad_norm"] == cast["grad_norm"]
    assert all(torch.equal(a, b) for a, b in zip(copied_grads, cast_grads, strict=True))


def _saved_bytes(policy, prefix) -> int:
    """Bytes autograd keeps for backward while the prefix's pass runs (the model's weights apart)."""
    weights = {p.untyped_storage().data_ptr() for p in policy.model.parameters()}
    kept = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sharing.SharedPrefix(policy, policy.model, prefix)
    return sum(kept.values())


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_recomputing_the_prefix_pass_gives_the_same_update(monkeypatch, dropout):
    # The prefix's activations are recomputed in its backward instead of kept through its group's
    # passes (sharing.RECOMPUTE_PREFIX, issue 25): the same loss and gradient, bit for bit, and the
    # same LoRA dropout masks (checkpoint restores the RNG state for the recomputation).
    policy = _policy(LoraSpec(rank=4, alpha=8, dropout=dropout))
    monkeypatch.setattr(sharing, "PASS_TOKENS", 1)  # several passes per prefix

    def update(recompute: bool):
        monkeypatch.setattr(sharing, "RECOMPUTE_PREFIX", recompute)
        torch.manual_seed(5)  # dropout draws from the global RNG
        return _update(policy, monkeypatch, True, 0.0)

    (kept, kept_grads), (recomputed, recomputed_grads) = update(False), update(True)
    assert kept["loss"] == recomputed["loss"] and kept["grad_norm"] == recomputed["grad_norm"]
    assert all(g.abs().max() > 0 for g in kept_grads)
    assert all(torch.equal(a, b) for a, b in zip(kept_grads, recomputed_grads, strict=True))
    if dropout:  # the masks matter: another draw gives another gradient
        torch.manual_seed(6)
        _, other = _update(policy, monkeypatch, True, 0.0)
        assert not all(torch.equal(a, b) for a, b in zip(kept_grads, other, strict=True))


def test_the_prefix_pass_keeps_no_activations_for_backward(policy, monkeypatch):
    prefix = training.update_groups(_items(policy), micro_batch=4, prefix_sharing=True)[0].prefix
    monkeypatch.setattr(sharing, "RECOMPUTE_PREFIX", False)
    kept = _saved_bytes(policy, prefix)
    monkeypatch.setattr(sharing, "RECOMPUTE_PREFIX", True)
    recomputed = _saved_bytes(policy, prefix)
    assert kept > 100 * len(prefix) * 2**10  # SmolLM2-135M fp32: ~1 MiB a token
    assert recomputed < kept / 100, (recomputed, kept)
