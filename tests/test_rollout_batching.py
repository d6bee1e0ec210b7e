"""Acting with cached system prompts (`trainer.rollout_batching`) equals the older paths.

Real SmolLM2-135M-Instruct. Prompts of different lengths, two system prompts (one with a scaffold),
twc-like candidate lists: the batched scores must match the per-episode scores (fp32 tightly, bf16
within its ~0.1-nat noise), the seeded draws must be the same, and a short real twc rollout must
choose the same actions on both paths. In generate mode, sampling from the cached prefixes must
give the tokens `generate` gives from whole prompts, greedy and seeded, and a real rollout the same
turns.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from pats.backends.local import LocalPolicy, scoring
from pats.backends.local.backend import LocalBackend
from pats.backends.local.scoring import PrefixStore
from pats.engine.run import make_env_factory
from pats.protocols import GroupPlan
from pats.spec import load_spec
from pats.spec.models import LocalTrainerSpec, LoraSpec, PolicySpec
from pats.types import EMPTY_VIEW, ScaffoldView

pytestmark = pytest.mark.slow

RULES = (
    "You are playing a text-based game. Each turn you read what happened and choose one action that "
    "brings you closer to finishing the task. Only the admissible actions work; anything else wastes "
    "a turn.\nReply with exactly one admissible action, and nothing else.\n\nTask: Your task is to pick "
    "up objects, then place them in their usual locations in the environment."
)
SCAFFOLDED = RULES + "\n\n- plan: take the dirty socks, then put the dirty socks in the washing machine."
KITCHEN = ["look around", "inventory", "open fridge", "take red apple", "put red apple in fridge"]
LAUNDRY = [
    "look around", "inventory", "move west", "take dirty socks from floor", "open washing machine",
    "put dirty socks in washing machine", "close laundry basket",
]  # fmt: skip
CASES = [  # (system, user, admissible actions): three lengths, two system prompts
    (RULES, "Observation: You are in the kitchen. You see a closed fridge and a red apple.\n"
     f"Admissible actions: {', '.join(KITCHEN)}", KITCHEN),
    (SCAFFOLDED, "Recent history:\n> look around\nYou are in the laundry room. You see a washing "
     "machine, a laundry basket and dirty socks on the floor.\n> open washing machine\nYou open the "
     "washing machine. It is empty.\nObservation: You open the washing machine. It is empty.\n"
     f"Admissible actions: {', '.join(LAUNDRY)}", LAUNDRY),
    (RULES, "Observation: Nothing happens.\nAdmissible actions: look around, inventory",
     ["look around", "inventory"]),
]  # fmt: skip


@pytest.fixture(scope="module")
def policy():
    threads = torch.get_num_threads()
    trainer = LocalTrainerSpec(threads=1, autocast_bf16=False)
    yield LocalPolicy(PolicySpec(action="score", lora=LoraSpec(rank=4, alpha=8)), trainer, seed=0)
    torch.set_num_threads(threads)


def _per_episode(policy):
    return [policy.score_actions(policy.chat_ids(s, u), a) for s, u, a in CASES]


def _lengths_and_prefixes(policy):
    split = [policy.chat_split(s, u) for s, u, _ in CASES]
    lengths = [
        scoring.packed_length(r, [policy.action_ids(a) for a in acts])
        for (_, r), (*_, acts) in zip(split, CASES, strict=True)
    ]
    return lengths, [tuple(h) for h, _ in split]


def _batched(policy, store=None):
    split = [policy.chat_split(s, u) for s, u, _ in CASES]
    with torch.no_grad(), policy.autocast_context():
        scores = scoring.score_batch(
            policy.model,
            PrefixStore() if store is None else store,
            [h for h, _ in split],
            [r for _, r in split],
            [[policy.action_ids(a) for a in acts] for *_, acts in CASES],
            pad_id=policy.pad_id,
            chunk=policy.trainer.logprob_chunk,
            normalization=policy.spec.score_normalization,
        )
    return [s.float().cpu() for s in scores]


def test_the_split_is_the_chat_template(policy):
    for system, user, _ in CASES:
        head, rest = policy.chat_split(system, user)
        assert head + rest == policy.chat_ids(system, user)
        assert head[-2:] == policy.tokenizer("<|im_end|>\n", add_special_tokens=False)["input_ids"]
        assert rest[0] == policy.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert policy.chat_split(RULES, "x")[0] == policy.chat_split(RULES, "y")[0]  # shared by turns


@pytest.mark.parametrize("normalization,budget", [("mean", 8192), ("sum", 8192), ("mean", 1)])
def test_batched_scores_equal_per_episode_scores_in_fp32(policy, monkeypatch, normalization, budget):
    monkeypatch.setattr(policy, "spec", policy.spec.model_copy(update={"score_normalization": normalization}))
    monkeypatch.setattr(scoring, "BATCH_TOKENS", budget)  # 1: every episode its own pass
    store = PrefixStore()
    for _ in range(2):  # the second call reuses the stored prefixes
        for slow, fast in zip(_per_episode(policy), _batched(policy, store), strict=True):
            assert fast.shape == slow.shape
            assert torch.allclose(fast, slow, atol=1e-4), (fast, slow)
    assert len(store.kv) == 2  # two distinct system prompts, each computed once
    lengths, prefixes = _lengths_and_prefixes(policy)
    assert len(scoring.pack_rows(lengths, prefixes, max(lengths))) == 2  # two short episodes share a row


def test_packing_fills_rows_longest_first_and_keeps_prefixes_together():
    assert scoring.pack_rows([5, 3, 2, 4], [(1,), (2,), (1,), (2,)], 5) == [[0], [3], [1, 2]]
    # With room in two rows, an episode joins the row that holds its prefix.
    assert scoring.pack_rows([6, 6, 2], [(1,), (2,), (2,)], 8) == [[0], [1, 2]]


def test_batched_scores_stay_within_bf16_noise(policy, monkeypatch):
    fp32 = _per_episode(policy)
    monkeypatch.setattr(policy, "autocast", True)
    slow, fast = _per_episode(policy), _batched(policy)
    for ref, s, f in zip(fp32, slow, fast, strict=True):
        # bf16 moves single scores by up to ~0.15 nats on either path; the distribution barely.
        assert (f - s).abs().max() < 0.3 and (f - ref).abs().max() < 0.3
        p, q = s.softmax(0), f.softmax(0)
        assert (p * (p / q).log()).sum() < 0.02


def test_choose_batch_draws_like_choose_one_by_one(policy):
    state = policy.generator.get_state()
    one_by_one = [policy.choose(policy.chat_ids(s, u), a, greedy=False) for s, u, a in CASES * 3]
    policy.generator.set_state(state)
    split = [policy.chat_split(s, u) for s, u, _ in CASES * 3]
    batched = policy.choose_batch(split, [a for *_, a in CASES * 3], greedy=False)
    assert [i for i, _ in batched] == [i for i, _ in one_by_one]
    for (_, p), (_, q) in zip(batched, one_by_one, strict=True):
        assert torch.allclose(p, q, atol=1e-5)
    with pytest.raises(ValueError, match="no candidate"):
        policy.choose_batch([policy.chat_split(RULES, "x")], [[]], greedy=True)


@pytest.mark.parametrize("greedy", [True, False])
def test_generate_from_cached_prefixes_gives_the_whole_prompt_tokens(policy, greedy):
    split = [policy.chat_split(s, u) for s, u, _ in CASES * 2]
    split.append(([], policy.chat_ids("Be brief.", "Say hi.")))  # a prompt with nothing cached
    state = policy.generator.get_state()
    whole = policy.generate([h + r for h, r in split], max_new_tokens=12, greedy=greedy)
    store = PrefixStore()
    for _ in range(2):  # the second call reuses the stored prefixes, and draws from the same seed
        policy.generator.set_state(state)
        assert policy.generate_batch(split, max_new_tokens=12, greedy=greedy, store=store) == whole
    assert len(store.kv) == 2  # the two system prompts, each computed once
    assert sum(map(len, whole)) > 3 * len(whole)  # real continuations, not an immediate end


def test_a_real_generate_rollout_plays_the_same_turns_on_both_paths(repo):
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        [
            "policy.action=generate",
            "policy.max_new_tokens=8",
            "environment.max_turns=2",
            "trainer.autocast_bf16=false",
            "trainer.threads=1",
        ],
    )
    make_env = make_env_factory(spec)
    backend = LocalBackend(spec, make_env)
    plans = [GroupPlan(task=t, view=EMPTY_VIEW, size=2) for t in make_env().tasks("train")[:2]]

    def play(batching: bool):
        backend.policy.trainer = backend.policy.trainer.model_copy(update={"rollout_batching": batching})
        backend.policy.generator.manual_seed(3)
        return [p.training for p in asyncio.run(backend.rollout(0, plans))]

    try:
        fast, slow = play(True), play(False)
    finally:
        asyncio.run(backend.close())
    assert fast == slow  # the same prompt ids and the same sampled tokens, turn by turn
    assert sum(len(turns) for group in fast for turns in group) >= 6


def test_a_real_rollout_chooses_the_same_actions_on_both_paths(repo):
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["environment.max_turns=3", "trainer.autocast_bf16=false", "trainer.threads=1"],
    )
    make_env = make_env_factory(spec)
    backend = LocalBackend(spec, make_env)
    tasks = make_env().tasks("train")[:2]
    view = ScaffoldView(version="v1", text="- plan: look around, then take what lies on the floor.")
    plans = [
        GroupPlan(task=tasks[0], view=view, size=3, probes=1),
        GroupPlan(task=tasks[1], view=EMPTY_VIEW, size=2),
    ]

    def play(batching: bool):
        backend.policy.trainer = backend.policy.trainer.model_copy(update={"rollout_batching": batching})
        backend.policy.generator.manual_seed(7)
        played = asyncio.run(backend.rollout(0, plans))
        return [p.group for p in played], [p.training for p in played]

    try:
        (fast, fast_items), (slow, slow_items) = play(True), play(False)
    finally:
        asyncio.run(backend.close())
    actions = lambda groups: [[t.action for t in r.turns] for g in groups for r in g.rollouts]  # noqa: E731
    assert actions(fast) == actions(slow)
    assert sum(map(len, actions(fast))) >= 10
    tokens = lambda groups: [t.prompt_tokens for g in groups for r in g.rollouts for t in r.turns]  # noqa: E731
    assert tokens(fast) == tokens(slow)
    assert fast_items == slow_items  # the training items (prompt ids, actions, choice) are identical
