"""The local policy on the real SmolLM2-135M-Instruct (fp32, one thread): scoring, acting, training,
checkpoints. Full fine-tuning is checked on a tiny random Llama so that the module stays fast."""

from __future__ import annotations

import pytest
import torch

from pats.backends.local import LocalPolicy, TrainItem, grpo, scoring
from pats.spec.models import LocalTrainerSpec, LoraSpec, PolicySpec

pytestmark = pytest.mark.slow

ACTIONS = ["open fridge", "go north", "take the red apple from the wooden table", "look", "inventory"]


@pytest.fixture(scope="module")
def policy():
    threads = torch.get_num_threads()
    trainer = LocalTrainerSpec(lr=1e-3, threads=1, autocast_bf16=False, micro_batch=2)
    yield LocalPolicy(PolicySpec(action="score", lora=LoraSpec(rank=4, alpha=8)), trainer, seed=0)
    torch.set_num_threads(threads)  # the spec's thread count is process-wide


@pytest.fixture(scope="module")
def prompt(policy):
    return policy.chat_ids(
        "You play a text game. Answer with one action.", "You are in a kitchen. What next?"
    )


def _uncached_scores(policy, prompt, actions, normalization):
    """Each prompt + action scored by its own plain forward pass over full logits."""
    scores = []
    for action in actions:
        item = TrainItem.of(prompt, policy.action_ids(action), advantage=0.0)
        ids, mask = list(item.input_ids), list(item.loss_mask)
        with torch.no_grad():
            logits = policy.model(input_ids=torch.tensor([ids])).logits[0].float()  # (T, V)
        logprobs = torch.gather(logits[:-1].log_softmax(-1), -1, torch.tensor(ids[1:]).unsqueeze(-1))
        scores.append(grpo.sequence_score(logprobs.T, torch.tensor([mask[1:]]), normalization))
    return torch.cat(scores)


def _response_logprob(policy, item):
    ids = torch.tensor([item.input_ids])
    with torch.no_grad():
        logprobs = grpo.token_logprobs(policy.model, ids, torch.ones_like(ids), chunk=64)
    return float((logprobs * torch.tensor([item.loss_mask[1:]])).sum())


def _trainable(policy):
    return [p.detach().clone() for p in policy.params]


@pytest.mark.parametrize("normalization,passes", [("mean", 1), ("sum", 1), ("mean", 3)])
def test_shared_cache_scores_equal_separate_passes(policy, prompt, monkeypatch, normalization, passes):
    monkeypatch.setattr(policy, "spec", policy.spec.model_copy(update={"score_normalization": normalization}))
    if passes > 1:  # a cache budget of two candidates per pass: 2 + 2 + 1
        monkeypatch.setattr(scoring, "CACHE_ROWS", 2 * len(prompt))
    cached = policy.score_actions(prompt, ACTIONS)
    assert cached.shape == (len(ACTIONS),)
    assert torch.allclose(cached, _uncached_scores(policy, prompt, ACTIONS, normalization), atol=1e-4)


def test_choose_is_a_seeded_distribution(policy, prompt):
    index, probs = policy.choose(prompt, ACTIONS, greedy=True)
    assert probs.sum().item() == pytest.approx(1.0, abs=1e-5)
    assert index == int(probs.argmax())
    state = policy.generator.get_state()
    first = [policy.choose(prompt, ACTIONS, greedy=False)[0] for _ in range(4)]
    policy.generator.set_state(state)
    assert [policy.choose(prompt, ACTIONS, greedy=False)[0] for _ in range(4)] == first
    assert all(0 <= i < len(ACTIONS) for i in first)


def test_generate_stops_at_eos_or_the_limit(policy, prompt):
    short = policy.chat_ids("Answer yes or no.", "Is the sky blue?")
    for greedy in (True, False):
        outputs = policy.generate([prompt, short], max_new_tokens=6, greedy=greedy)
        assert len(outputs) == 2
        for tokens in outputs:
            assert 1 <= len(tokens) <= 6
            assert policy.eos_id not in tokens[:-1]
            assert tokens[-1] == policy.eos_id or len(tokens) == 6


def test_update_raises_the_positive_sequence(policy, prompt):
    good = TrainItem.of(prompt, policy.action_ids("open fridge"), advantage=1.0)
    bad = TrainItem.of(prompt, policy.action_ids("inventory"), advantage=-1.0)
    before = _trainable(policy), _response_logprob(policy, good), _response_logprob(policy, bad)
    stats = policy.update([good, bad])
    assert stats["steps"] == 1 and stats["skipped"] == 0 and stats["items"] == 2
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # old log-probs recomputed: on-policy
    assert any(not torch.equal(a, b) for a, b in zip(before[0], _trainable(policy), strict=True))
    assert _response_logprob(policy, good) > before[1]
    assert _response_logprob(policy, bad) < before[2]


def test_choice_update_raises_the_chosen_probability(policy, prompt):
    chosen = 3
    before = policy.choose(prompt, ACTIONS, greedy=True)[1][chosen]
    stats = policy.update([policy.choice_item(prompt, ACTIONS, chosen, advantage=1.0)])
    assert stats["steps"] == 1
    assert policy.choose(prompt, ACTIONS, greedy=True)[1][chosen] > before


def test_kl_to_the_reference_is_reported_once_the_adapter_moved(policy, prompt, monkeypatch):
    monkeypatch.setattr(policy, "trainer", policy.trainer.model_copy(update={"kl_coef": 0.1}))
    item = TrainItem.of(prompt, policy.action_ids("go north"), advantage=0.5)
    stats = policy.update([item])
    assert stats["kl"] > 0 and stats["steps"] == 1


@pytest.mark.parametrize("advantage", [0.0, float("nan")])
def test_no_signal_or_nonfinite_skips_the_step(policy, prompt, advantage):
    items = [TrainItem.of(prompt, policy.action_ids(a), advantage=advantage) for a in ACTIONS[:2]]
    before = _trainable(policy)
    optimizer_state = {k: v["step"].clone() for k, v in policy.optimizer.state.items()}
    stats = policy.update(items)
    assert stats["skipped"] == 1 and stats["steps"] == 0
    assert stats["no_signal" if advantage == 0 else "nonfinite"] == 1
    assert all(torch.equal(a, b) for a, b in zip(before, _trainable(policy), strict=True))
    assert {k: v["step"] for k, v in policy.optimizer.state.items()} == optimizer_state


def test_save_load_round_trip(policy, prompt, tmp_path):
    policy.update([TrainItem.of(prompt, policy.action_ids("look"), advantage=1.0)])  # Adam state
    policy.save(tmp_path / "ckpt")
    policy.save(tmp_path / "ckpt")  # overwriting an existing checkpoint works
    saved_scores = policy.score_actions(prompt, ACTIONS)
    saved_sample = policy.choose(prompt, ACTIONS, greedy=False)[0]
    step = {k: v["step"].clone() for k, v in policy.optimizer.state.items()}
    policy.update([TrainItem.of(prompt, policy.action_ids("look"), advantage=-1.0)])
    assert not torch.equal(policy.score_actions(prompt, ACTIONS), saved_scores)
    policy.load(tmp_path / "ckpt")
    assert torch.equal(policy.score_actions(prompt, ACTIONS), saved_scores)
    assert policy.choose(prompt, ACTIONS, greedy=False)[0] == saved_sample  # sampler state restored
    assert {k: v["step"] for k, v in policy.optimizer.state.items()} == step
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary folders left


def test_full_fine_tuning_with_a_frozen_reference(tiny_model_dir, tmp_path):
    trainer = LocalTrainerSpec(lr=1e-2, kl_coef=0.1, autocast_bf16=False)
    policy = LocalPolicy(PolicySpec(model=str(tiny_model_dir), lora=None), trainer, seed=1)
    assert policy.reference is not None and len(policy.params) == len(list(policy.model.parameters()))
    prompt = policy.chat_ids("system", "user")
    good = TrainItem.of(prompt, policy.action_ids("yes"), advantage=1.0)
    first = policy.update([good, TrainItem.of(prompt, policy.action_ids("no"), advantage=-1.0)])
    assert first["kl"] == 0.0  # the policy still equals its reference before the first step
    before = _response_logprob(policy, good)
    second = policy.update([good])
    assert second["kl"] > 0 and _response_logprob(policy, good) > before
    policy.save(tmp_path / "full")
    scores = policy.score_actions(prompt, ["yes", "no"])
    policy.update([TrainItem.of(prompt, policy.action_ids("yes"), advantage=-1.0)])
    policy.load(tmp_path / "full")
    assert torch.equal(policy.score_actions(prompt, ["yes", "no"]), scores)


def test_bf16_autocast_stays_close_to_fp32(policy, prompt, monkeypatch):
    fp32 = policy.score_actions(prompt, ACTIONS)
    monkeypatch.setattr(policy, "autocast", True)
    bf16 = policy.score_actions(prompt, ACTIONS)
    # bf16 keeps ~3 digits: single scores move by up to ~0.2 nats, the action distribution barely.
    p, q = fp32.softmax(0), bf16.softmax(0)
    assert (p * (p / q).log()).sum() < 0.02 and p.argmax() == q.argmax()
    stats = policy.update([policy.choice_item(prompt, ACTIONS, 0, advantage=1.0)])
    assert stats["steps"] == 1 and stats["ratio_mean"] == pytest.approx(1.0, abs=1e-3)


def test_acting_on_bf16_copies_of_the_frozen_weights_changes_no_number(policy, prompt, monkeypatch):
    monkeypatch.setattr(policy, "autocast", True)
    linear = policy.model.get_decoder().layers[0].mlp.up_proj
    original = linear.weight
    with torch.no_grad(), policy.autocast_context():  # autocast casting every weight on every call
        plain = policy.candidate_scores(prompt, [policy.action_ids(a) for a in ACTIONS]).float()
    state = policy.generator.get_state()
    with torch.no_grad(), policy.autocast_context():
        tokens = policy.model.generate(
            input_ids=torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=policy.pad_id
        )[0, len(prompt) :].tolist()
    assert torch.equal(policy.score_actions(prompt, ACTIONS), plain)  # bit for bit
    policy.generator.set_state(state)
    cut = tokens[: tokens.index(policy.eos_id) + 1] if policy.eos_id in tokens else tokens
    assert policy.generate([prompt], max_new_tokens=8, greedy=True) == [cut]
    with policy.acting_context():
        assert linear.weight.dtype == torch.bfloat16
        assert policy.model.get_input_embeddings().weight.dtype == torch.float32  # the lookup stays fp32
    assert linear.weight is original  # put back after the block


@pytest.mark.parametrize("lora", [None, LoraSpec(rank=2, alpha=4, dropout=0.5, target_modules=("q_proj",))])
def test_second_epoch_is_off_policy_and_clipped(tiny_model_dir, lora):
    # With dropout the old log-probs come from their own no-grad pass; without, from epoch 1.
    lr = 0.05 if lora is None else 0.5  # LoRA's B starts at zero: its first steps move the model less
    # With LoRA dropout the ratios move by ~0.005 and the masks' draw decides their direction: six
    # answers and a 0.001 clip make some token clip whatever the draw (seeds 2-5 checked: 14-39%).
    trainer = LocalTrainerSpec(lr=lr, epochs=3, clip_low=0.001, clip_high=0.001, autocast_bf16=False)
    policy = LocalPolicy(PolicySpec(model=str(tiny_model_dir), lora=lora), trainer, seed=2)
    prompt = policy.chat_ids("system", "user")
    answers = [
        ("yes", 1.0),
        ("no", -1.0),
        ("maybe later", 1.0),
        ("never again", -1.0),
        ("sure thing", 0.5),
        ("not now", -0.5),
    ]
    items = [TrainItem.of(prompt, policy.action_ids(a), advantage=adv) for a, adv in answers]
    stats = policy.update(items)
    assert stats["steps"] == 3
    assert stats["approx_kl"] > 0 and stats["clip_frac"] > 0


def test_choices_of_one_decision_share_a_pass_with_the_same_update(tiny_model_dir):
    """Rollouts of a group make the same first decision: their choices run as one unit, and the
    update equals running each on its own."""
    from pats.backends.local import training

    trainer = LocalTrainerSpec(lr=0.5, autocast_bf16=False, update_prefix_sharing=False)  # `_units` path
    spec = PolicySpec(model=str(tiny_model_dir), action="score", lora=LoraSpec(rank=2, alpha=4))
    shared, alone = (LocalPolicy(spec, trainer, seed=4) for _ in range(2))
    prompt, other = shared.chat_ids("system", "user"), shared.chat_ids("system", "another user")

    def items(policy):
        return [
            policy.choice_item(prompt, ["yes", "no", "maybe"], 0, advantage=1.0, weight=0.5),
            policy.choice_item(prompt, ["yes", "no", "maybe"], 1, advantage=-1.0, weight=0.25),
            policy.choice_item(prompt, ["yes", "no", "maybe"], 0, advantage=1.0, weight=0.25),
            policy.choice_item(other, ["yes", "no", "maybe"], 2, advantage=0.5),
        ]

    groups = training.update_groups(items(shared), micro_batch=4, prefix_sharing=False)
    assert sorted(len(u) for g in groups for u in g.units) == [1, 3]
    stats = shared.update(items(shared))
    alone_stats = training.run_update(alone, items(alone), one_per_pass=True)
    assert stats["steps"] == alone_stats["steps"] == 1
    assert stats["loss"] == pytest.approx(alone_stats["loss"], abs=1e-6)
    for a, b in zip(shared.params, alone.params, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(shared.params, _trainable(LocalPolicy(spec, trainer, seed=4)), strict=True)
    )


def test_top_layers_puts_adapters_on_the_last_layers_only(tiny_model_dir):
    from pats.errors import BackendError

    trainer = LocalTrainerSpec(autocast_bf16=False)
    policy = LocalPolicy(
        PolicySpec(model=str(tiny_model_dir), lora=LoraSpec(rank=2, alpha=4, top_layers=1)), trainer, seed=0
    )
    names = [n for n, p in policy.model.named_parameters() if p.requires_grad]
    assert names and all(".layers.1." in n for n in names), names
    with pytest.raises(BackendError, match="top_layers is 3 .* 2 layers"):
        LocalPolicy(PolicySpec(model=str(tiny_model_dir), lora=LoraSpec(top_layers=3)), trainer, seed=0)


def test_on_a_cpu_the_policy_trains_with_the_recomputed_attention(policy):
    """Its passes with gradients skip torch's slow CPU flash-attention backward (attention.py)."""
    from pats.backends.local import attention

    assert policy.model.config._attn_implementation == attention.NAME
    assert attention.takes_boolean_mask(policy.model)
