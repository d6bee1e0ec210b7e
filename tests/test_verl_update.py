"""verl's own GRPO step on the DataProto pats' agent loop returns, on the CPU.

Real episodes (TextWorldExpress, verl's AgentLoopWorker, a scripted server) go through the functions
verl 0.9.1's V1 trainer and its actor worker call, configured by the Hydra config pats' export writes:
`compute_advantage_for_multi_trajectories` (-> `core_algos.compute_grpo_outcome_advantage`, what
the V1 trainer's `_compute_advantage` calls) and `verl.workers.utils.losses.ppo_loss` (the loss the
engine worker binds: `core_algos` vanilla policy loss, `agg_loss`, low_var_kl `kl_penalty`), with a
tiny random Llama over the batch's tokens as the actor. verl's FSDP engine itself is not built:
verl registers it for CUDA and NPU devices only (`EngineRegistry.register(..., device=["cuda",
"npu"])`), so the log-probs it would compute come from the tiny model here, laid out as the engine
lays them out (unpadded, one per token, shifted by one) for `no_padding_2_padding`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from pats.testing.verl import composed_config, expert_task, loop_worker, require_verl_or_skip, rows_batch

require_verl_or_skip()
import torch
from tensordict import TensorDict
from verl.protocol import DataProto
from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories
from verl.utils import tensordict_utils as tu
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.rollout.replica import TokenOutput
from verl.workers.utils.losses import ppo_loss

from pats.backends.verl.data import task_rows
from pats.envs.twx import TwxEnv
from pats.spec import load_spec

pytestmark = pytest.mark.slow  # real episodes (JVMs), a model forward/backward; still CPU, still in CI

PROMPT, RESPONSE, TURNS = 512, 1200, 6


class GroupServer:
    """The first trajectory it sees plays the expert plan (wins); every other one repeats `look` until
    the turns run out (loses). Log-probs differ per token, all finite and negative."""

    def __init__(self, tokenizer, plan: list[str], winners: int):
        self.tokenizer, self.plan, self.winners = tokenizer, plan, winners
        self.turns: dict[str, int] = {}
        self.logprobs: dict[str, list[float]] = {}

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        wins = list(self.turns).index(request_id) < self.winners
        action = self.plan[k] if wins and k < len(self.plan) else "look"
        ids = self.tokenizer(f"<action>{action}</action>", add_special_tokens=False)["input_ids"]
        ids = ids + [self.tokenizer.eos_token_id]
        logps = [-0.1 - 0.01 * ((k + j) % 7) for j in range(len(ids))]
        self.logprobs.setdefault(request_id, []).extend(logps)
        return TokenOutput(token_ids=ids, log_probs=logps, stop_reason="completed")


def spec_and_config(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "name: verl-update\n"
        "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},\n"
        f"  num_train_tasks: 1, num_eval_tasks: 1, max_turns: {TURNS}}}\n"
        "policy: {max_new_tokens: 16}\n"
        "scaffold: {mode: none}\n"
        f"trainer: {{backend: verl, max_prompt_tokens: {PROMPT}, max_response_tokens: {RESPONSE},\n"
        "  tasks_per_step: 2, group_size: 2, gpus_per_node: 1, rollout_engine: sglang,\n"
        "  micro_batch_per_gpu: 1, kl_coef: 0.01}\n"
        f"logging: {{root: {tmp_path / 'runs'}, wandb: disabled}}\n"
    )
    spec = load_spec(path)
    return spec, composed_config(spec, tmp_path)


async def play(cfg, spec, monkeypatch, winners: int, uid_prefix: str) -> tuple[DataProto, GroupServer]:
    """One group of group_size rollouts of the training task through verl's AgentLoopWorker."""
    task, plan = await expert_task(TwxEnv(spec.environment))
    _, worker = loop_worker(cfg, monkeypatch)
    worker.llm_client = server = GroupServer(worker.tokenizer, plan, winners)
    rows = [r for r in task_rows([task], "twx", validation=False) for _ in range(spec.trainer.group_size)]
    return await worker.generate_sequences(rows_batch(rows, 1, uid_prefix)), server


class TinyActor(torch.nn.Module):
    """A random 2-layer Llama over the batch's own token set (ids mapped to their rank in it): a
    stand-in actor whose log-probs and gradients have verl's layout; its quality is irrelevant."""

    def __init__(self, batch):
        from transformers import LlamaConfig, LlamaForCausalLM

        super().__init__()
        self.vocab = torch.unique(torch.cat([batch["prompts"].flatten(), batch["responses"].flatten()]))
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=len(self.vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=PROMPT + RESPONSE,
        )  # fmt: skip
        self.model = LlamaForCausalLM(config).float()

    def forward(self, input_ids):
        return self.model(input_ids=torch.searchsorted(self.vocab, input_ids))


def unpadded_log_probs(model, batch) -> torch.Tensor:
    """(total valid tokens,) what verl's engine returns as `log_probs` in no-padding mode: per row, the
    valid prompt then the valid response; entry t is log p(token t+1), the last entry 0."""
    prompts, responses, attention = batch["prompts"], batch["responses"], batch["attention_mask"]
    out = []
    for i in range(prompts.shape[0]):
        prompt = prompts[i][attention[i, :PROMPT].bool()]
        response = responses[i][attention[i, PROMPT:].bool()]
        ids = torch.cat([prompt, response])[None]  # (1, T)
        logits = model(ids).logits[0, :-1].float()  # (T-1, V)
        targets = torch.searchsorted(model.vocab, ids[0, 1:])
        logp = torch.log_softmax(logits, -1).gather(-1, targets[:, None])[:, 0]
        out.append(torch.cat([logp, logp.new_zeros(1)]))
    return torch.cat(out)


async def test_verls_grpo_step_on_pats_episodes(tmp_path, monkeypatch):
    spec, cfg = spec_and_config(tmp_path)
    # Group a: one win, one loss. Group b: two losses (no signal: its advantages must stay 0).
    mixed, server_a = await play(cfg, spec, monkeypatch, winners=1, uid_prefix="a-")
    failed, server_b = await play(cfg, spec, monkeypatch, winners=0, uid_prefix="b-")
    data = DataProto.concat([mixed, failed])
    uids = list(data.non_tensor_batch["uid"])
    rewards = data.batch["rm_scores"].sum(-1).tolist()
    assert uids[0] == uids[1] != uids[2] == uids[3]
    assert sorted(rewards[:2]) == [0.0, 1.0] and rewards[2:] == [0.0, 0.0]
    mask = data.batch["response_mask"].bool()  # (B, RESPONSE): 1 on the policy's tokens
    valid = data.batch["attention_mask"][:, PROMPT:].bool()
    assert (mask & ~valid).sum() == 0 and ((~mask) & valid).any(), "observations sit in the response"

    # The rollout log-probs are the server's, finite and non-zero on every policy token; 0 elsewhere.
    rollout = data.batch["rollout_log_probs"]
    served = [lp for s in (server_a, server_b) for lps in s.logprobs.values() for lp in lps]
    assert torch.isfinite(rollout).all() and (rollout[mask] < 0).all() and (rollout[~mask] == 0).all()
    assert sorted(rollout[mask].tolist()) == pytest.approx(sorted(served), abs=1e-6)

    # verl's advantage, as its V1 trainer computes it (rm_scores -> token-level rewards, no KL in reward).
    assert cfg.algorithm.adv_estimator == "grpo" and not cfg.algorithm.use_kl_in_reward
    data.batch["token_level_scores"] = data.batch["rm_scores"]
    data.batch["token_level_rewards"] = data.batch["token_level_scores"]
    keys = [f"{uid}_{i}_0" for i, uid in enumerate(uids)]  # {uid}_{session}_{index}: one output each
    data = compute_advantage_for_multi_trajectories(
        data,
        batch_keys=keys,
        adv_estimator=cfg.algorithm.adv_estimator,
        gamma=cfg.algorithm.gamma,
        lam=cfg.algorithm.lam,
        num_repeat=cfg.actor_rollout_ref.rollout.n,
        norm_adv_by_std_in_grpo=cfg.algorithm.norm_adv_by_std_in_grpo,
        config=cfg.algorithm,
    )
    adv = data.batch["advantages"]  # (B, RESPONSE)
    # Per uid: (r - group mean) / (group std + 1e-6) on every policy token; group b has no signal.
    expected = [(r - 0.5) / (math.sqrt(0.5) + 1e-6) for r in rewards[:2]] + [0.0, 0.0]
    for i, a in enumerate(expected):
        assert torch.allclose(adv[i][mask[i]], torch.full_like(adv[i][mask[i]], a), atol=1e-5)
        assert (adv[i][~mask[i]] == 0).all(), "no advantage on environment tokens or padding"
    pooled = np.array(rewards)
    assert abs((pooled[2] - pooled.mean()) / pooled.std(ddof=1)) > 0.1  # a global normalization: not 0

    # verl's actor loss (the function its engine worker binds), with the actor config the export wrote.
    actor_config = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    assert actor_config.use_kl_loss and actor_config.kl_loss_type == "low_var_kl"
    assert (actor_config.clip_ratio_low, actor_config.clip_ratio_high) == (
        spec.trainer.clip_low,
        spec.trainer.clip_high,
    )
    batch = data.batch
    model = TinyActor(batch)
    with torch.no_grad():
        old = unpadded_log_probs(model, batch)
    td = TensorDict(
        {
            "prompts": batch["prompts"],
            "responses": batch["responses"],
            "attention_mask": batch["attention_mask"],
            "response_mask": batch["response_mask"],
            "advantages": adv,
        },
        batch_size=[len(uids)],
    )
    old_padded = _padded(old, td)
    td["old_log_probs"], td["ref_log_prob"] = old_padded, old_padded  # step 0: actor = reference
    assert torch.isfinite(old_padded[mask]).all() and (old_padded[mask] < 0).all()
    tu.assign_non_tensor(
        td,
        dp_size=1,
        batch_num_tokens=int(mask.sum()),
        global_batch_size=cfg.actor_rollout_ref.actor.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n,
    )

    log_probs = unpadded_log_probs(model, batch)
    log_probs.retain_grad()
    loss, metrics = ppo_loss(actor_config, {"log_probs": log_probs}, td)
    assert torch.isfinite(loss) and "kl_loss" in metrics
    loss.backward()
    # The gradient reaches the loss through the policy's tokens only: zero weight on the prompt, the
    # observations and the padding; non-zero on every policy token of the group with a signal.
    grad = _padded(log_probs.grad, td)  # (B, RESPONSE), response positions only
    assert (grad[~mask] == 0).all(), "environment tokens carry no loss"
    assert (grad[:2][mask[:2]] != 0).all() and (grad[2:] == 0).all()
    assert _prompt_grad(log_probs.grad, td) == 0
    # Its sign follows the advantage: the win's tokens become likelier, the loss's less likely.
    winner = int(rewards[1] > rewards[0])
    assert (grad[winner][mask[winner]] < 0).all() and (grad[1 - winner][mask[1 - winner]] > 0).all()
    params = [p for p in model.parameters() if p.grad is not None]
    assert params and sum(float(p.grad.norm()) for p in params) > 0

    # One small SGD step moves the policy tokens' log-probs the advantages' way and lowers verl's loss
    # (the win and the loss share most tokens, so the advantage-weighted change is what must rise).
    with torch.no_grad():
        for p in params:
            p -= 0.05 * p.grad
        after = unpadded_log_probs(model, batch)
        moved = _padded(after, td) - old_padded
        new_loss, _ = ppo_loss(actor_config, {"log_probs": after}, td)
    assert float((adv * moved)[mask].sum()) > 0 and float(new_loss) < float(loss.detach())


def _padded(flat: torch.Tensor, td: TensorDict) -> torch.Tensor:
    """(B, RESPONSE) response log-probs (or their gradients) from the unpadded layout, as verl slices."""
    from verl.workers.utils.padding import no_padding_2_padding

    return no_padding_2_padding(flat, td)


def _prompt_grad(flat_grad: torch.Tensor, td: TensorDict) -> float:
    """Summed |gradient| on entries that predict a prompt token (before each row's response)."""
    attention, total, start = td["attention_mask"], 0.0, 0
    for i in range(attention.shape[0]):
        prompt_len, length = int(attention[i, :PROMPT].sum()), int(attention[i].sum())
        total += float(flat_grad[start : start + prompt_len - 1].abs().sum())
        start += length
    return total
