"""verl 0.9.1's V1 sync trainer (what `trainer.use_v1=True`, pats' setting, runs) over pats' data, on
the CPU, for two steps of its own `fit` loop.

verl's own pieces: `PPOTrainerSync` (`fit`, `step`, its RLHFDataset and dataloader over the parquet
`pats export` writes, the uid and global_steps it adds to each batch, its ReplayBuffer, the
TransferQueue on local Ray, `_compute_old_log_prob`, `_compute_ref_log_prob`, `_compute_advantage`
with `compute_advantage_for_multi_trajectories`, `_update_actor`, `_compute_metrics`), its
`AgentLoopWorkerTQ` running the pats agent loops on real TextWorldExpress games, and `tqbridge`,
which hands the trainer's KVBatchMeta to the worker methods as a TensorDict read from the queue.
Stand-ins (pats.testing.verl) for what needs GPUs: the rollout server (scripted, with log-probs and
the weights version verl's server client stamps), the FSDP actor worker group (a tiny model, verl's
`ppo_loss`), the weight sync; and `_setup` (Ray worker groups on GPU placement groups, see
docs/verl.md "What has run where") is replaced by setting those stand-ins on the trainer.

The scaffold service runs in this process, beside the agent loops, and ends each step: a group with
one win and one failure lets the rules reviser write a plan, so step 2 plays under a new version.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pats.testing.verl import (
    InProcessAgentLoops,
    PlanServer,
    StandInActor,
    StandInCheckpointManager,
    require_verl_or_skip,
)

require_verl_or_skip()
import ray
import torch
import transfer_queue as tq
from omegaconf import open_dict
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.dataset.rl_dataset import RLHFDataset

import pats.backends.verl.loop as loop_module
import pats.backends.verl.sampler as sampler_module
from pats.backends.verl.config import TRAIN_LOOP, compose
from pats.backends.verl.launch import write_bundle
from pats.backends.verl.sampler import PatsReplayBuffer
from pats.backends.verl.service import ScaffoldService
from pats.envs.twx import TwxEnv
from pats.errors import TrainingError
from pats.logging.events import StepEndEvent, read_events
from pats.spec import load_spec

pytestmark = pytest.mark.slow  # local Ray (the TransferQueue's actors), real JVMs; still CPU, still in CI

PROMPT, RESPONSE, TURNS, TASKS, GROUP = 512, 1200, 6, 2, 2


@pytest.fixture(scope="module")
def local_ray():
    # 2 logical CPUs: the TransferQueue controller and its storage unit each ask for one.
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, object_store_memory=200 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def spec_file(tmp_path, scaffold: str = ""):
    bank = tmp_path / "bank.json"
    bank.write_text(json.dumps({"entries": [{"kind": "skill", "scope": "general", "text": "Look first."}]}))
    path = tmp_path / "spec.yaml"
    path.write_text(
        "\n".join(
            [
                "name: verl-v1",
                "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},",
                f"  num_train_tasks: {TASKS}, num_eval_tasks: 1, max_turns: {TURNS}}}",
                "policy: {max_new_tokens: 16}",
                f"scaffold: {{initial_bank: {bank}, probe_fraction: 0, cards: [outcome, contrast, failure]{scaffold}}}",
                f"trainer: {{backend: verl, max_prompt_tokens: {PROMPT}, max_response_tokens: {RESPONSE},",
                f"  steps: 2, tasks_per_step: {TASKS}, group_size: {GROUP}, gpus_per_node: 1,",
                "  rollout_engine: sglang, micro_batch_per_gpu: 1, kl_coef: 0.01}",
                "eval: {at_start: false}",
                f"logging: {{root: {tmp_path / 'runs'}, wandb: disabled}}",
            ]
        )
        + "\n"
    )
    return path


async def first_observations(spec) -> dict[str, list[str]]:
    """{first observation of each training task: its expert plan} (the server's script)."""
    env = TwxEnv(spec.environment)
    plans = {}
    for task in env.tasks("train"):
        plans[(await env.reset(task)).observation.strip()] = env.expert_plan(task)
    await env.close()
    assert len(plans) == TASKS, "two games with the same first observation: the script needs another key"
    return plans


@dataclass
class Fit:
    """verl's sync trainer over the exported bundle, with pats' stand-ins and the service in-process."""

    spec: Any
    cfg: Any
    run_dir: Path
    trainer: Any
    server: PlanServer
    actor: StandInActor
    loops: InProcessAgentLoops
    service: ScaffoldService


@contextmanager
def verl_fit(tmp_path, monkeypatch, scaffold: str = "", refill: bool = False) -> Iterator[Fit]:
    spec = load_spec(spec_file(tmp_path, scaffold))
    run_dir = tmp_path / "run"
    # The bundle `pats export verl` writes (spec.yaml, agent_loops.yaml, train/val parquet) and the
    # config `pats run` composes from it.
    cfg = compose(write_bundle(spec, tmp_path / "bundle", run_dir=str(run_dir)))
    assert (cfg.trainer.use_v1, cfg.trainer.v1.trainer_mode) == (True, "sync")
    with open_dict(cfg):
        # Test-only: one TransferQueue storage actor (8 by default), the dataset read in this process,
        # no validation pass (eval.every cannot be 0), no checkpoint.
        cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
        cfg.data.dataloader_num_workers = 0
        cfg.trainer.test_freq = -1
        cfg.trainer.save_freq = -1
        cfg.transfer_queue.enable = True  # what TaskRunnerV1.run sets
        cfg.trainer.v1.sampler.sync_refill_failed_groups = refill
    tq.init(cfg.transfer_queue)  # what TaskRunnerV1.run does, before it builds the trainer

    loops = None
    try:
        # The replay buffer (pats' PatsReplayBuffer, from the config) asks the service in this process.
        holder: list[ScaffoldService] = []
        monkeypatch.setattr(
            sampler_module,
            "stop_reason",
            lambda spec_path, run, step: loops.call(holder[0].stop_reason(step)),
        )
        trainer = PPOTrainerSync(cfg)
        assert isinstance(trainer.replay_buffer, PatsReplayBuffer)
        # What PPOTrainer._setup does without the Ray worker groups: tokenizer, datasets, stand-ins.
        trainer._init_tokenizer()
        trainer._init_dataloader()
        trainer._init_dump_executor()
        trainer._init_resource_pool_mgr()  # the pool spec only; create_resource_pool() wants GPUs
        assert isinstance(trainer.train_dataset, RLHFDataset) and len(trainer.train_dataset) == TASKS
        assert trainer.total_training_steps == 2

        plans = asyncio.run(first_observations(spec))
        server = PlanServer(trainer.tokenizer, plans)
        actor = StandInActor(omega_conf_to_dataclass(cfg.actor_rollout_ref.actor))
        trainer.actor_rollout_wg = trainer.ref_policy_wg = actor
        trainer.ref_in_actor = False  # no LoRA: verl builds a reference policy beside the actor
        # Rewards come from the pats loop (reward_score); verl's RewardLoopManager without a reward
        # model returns its (here: no) rule-reward workers, so the trainer skips the colocated reward.
        trainer.reward_loop_manager = type("Rewards", (), {"reward_loop_worker_handles": []})()
        trainer.checkpoint_manager = StandInCheckpointManager(server)
        trainer._load_checkpoint()  # no checkpoint: global_steps = 0
        trainer.on_init_end()  # the sync trainer: the rollout server gets version 0

        loops = InProcessAgentLoops(cfg, server)
        # The pats loops reach the scaffold service in this process (on the loops' event loop)
        # instead of the named Ray actor.
        service = loops.call(_service(cfg))
        holder.append(service)
        monkeypatch.setattr(loop_module, "connect", lambda spec_path, run_dir: service)
        yield Fit(spec, cfg, run_dir, trainer, server, actor, loops, service)
    finally:
        if loops is not None:
            loops.close()
        tq.close()


def test_two_steps_of_verls_v1_trainer_over_pats_episodes(tmp_path, monkeypatch, local_ray):
    with verl_fit(tmp_path, monkeypatch) as fit:
        fit.trainer.fit(fit.loops)
        fit.loops.call(fit.service.wait_reviews())
        state = fit.loops.call(fit.service.state())
    spec, cfg, run_dir, trainer, server, actor, loops = (
        fit.spec, fit.cfg, fit.run_dir, fit.trainer, fit.server, fit.actor, fit.loops
    )  # fmt: skip

    assert not server.unmatched, f"the script knows no plan for: {server.unmatched[0][-400:]!r}"

    # -- the dataset and the trainer's columns ---------------------------------------------------
    assert len(loops.batches) == 2
    uids = []
    for step, batch in enumerate(loops.batches, start=1):
        rows = list(batch["uid"])
        assert len(rows) == TASKS == len(set(rows)) and all("_" not in u for u in rows)  # uuid4, one per task
        assert batch["global_steps"] == step  # tu.assign_non_tensor_data: one value for the batch
        assert list(batch["agent_name"]) == [TRAIN_LOOP] * TASKS  # from pats' parquet
        assert sorted(json.loads(r["task"])["id"] for r in batch["extra_info"]) == sorted(
            t.id for t in TwxEnv(spec.environment).tasks("train")
        )
        uids.append(set(rows))
    assert not uids[0] & uids[1], "each step draws fresh uids"

    # -- the sync trainer's rhythm: sample, sleep the replicas, update, serve the new weights ------
    assert trainer.checkpoint_manager.calls == [
        ("update_weights", 0),
        ("sleep_replicas", None),
        ("update_weights", 1),
        ("sleep_replicas", None),
        ("update_weights", 2),
    ]

    # -- what the actor update read, step by step --------------------------------------------------
    assert len(actor.updates) == 2
    kl = cfg.actor_rollout_ref.actor.use_kl_loss
    assert kl and cfg.algorithm.adv_estimator == "grpo"
    for step, update in enumerate(actor.updates, start=1):
        data = update["data"]
        for key in ("input_ids", "prompts", "responses", "response_mask", "old_log_probs", "ref_log_prob"):
            assert key in data.keys(), key
        for key in ("advantages", "returns", "rollout_log_probs", "rm_scores", "uid"):
            assert key in data.keys(), key
        n = data.batch_size[0]
        assert n == TASKS * GROUP
        mask = data["response_mask"].to_padded_tensor(0).bool()  # (n, longest response)
        lengths = data["responses"].offsets().diff()
        assert (data["response_mask"].offsets().diff() == lengths).all()
        for key in ("old_log_probs", "ref_log_prob", "advantages", "rollout_log_probs", "rm_scores"):
            assert (data[key].offsets().diff() == lengths).all(), f"{key}: one value per response token"
        # Observations sit in the response with mask 0; the policy's tokens have mask 1.
        assert mask.any(1).all() and (~mask & _valid(lengths, mask.shape[1])).any()
        # old_log_probs: the actor's recomputation (no bypass mode), the response part of its output.
        old = data["old_log_probs"].to_padded_tensor(0.0)
        assert torch.isfinite(old).all() and (old[mask] < 0).all()
        if step == 1:  # before the first update, the actor is the reference
            assert torch.equal(old, data["ref_log_prob"].to_padded_tensor(0.0))
        # The rollout's log-probs: the server's, on the policy's tokens; 0 on observation tokens.
        rollout = data["rollout_log_probs"].to_padded_tensor(0.0)
        assert (rollout[mask] < 0).all() and (rollout[~mask] == 0).all()
        served = sorted(lp for lps in _requests_of(server, step) for lp in lps)
        assert sorted(rollout[mask].tolist()) == pytest.approx(served, abs=1e-6)
        # GRPO advantages by verl's uid: (r - group mean) / (group std + 1e-6) on policy tokens, 0
        # elsewhere. Each group of GROUP rollouts has one win (1) and one failure (0).
        rewards = data["rm_scores"].to_padded_tensor(0.0).sum(-1).tolist()
        group_uids = list(data["uid"])
        adv = data["advantages"].to_padded_tensor(0.0)
        assert set(group_uids) == uids[step - 1]
        for uid in set(group_uids):
            rows = [i for i, u in enumerate(group_uids) if u == uid]
            assert sorted(rewards[i] for i in rows) == [0.0, 1.0]
            for i in rows:
                expected = (rewards[i] - 0.5) / (math.sqrt(0.5) + 1e-6)
                assert torch.allclose(adv[i][mask[i]], torch.full_like(adv[i][mask[i]], expected), atol=1e-5)
                assert (adv[i][~mask[i]] == 0).all(), "no advantage on observation tokens or padding"
        # The weights version each trajectory was generated with (verl's staleness tags): the one
        # before this step's update.
        fields = list(data["extra_fields"])
        assert [(f["min_global_steps"], f["max_global_steps"]) for f in fields] == [(step - 1, step - 1)] * n
        assert math.isfinite(update["loss"])
    # The update moved the policy (verl's ppo_loss had a gradient).
    moved = [k for k, v in actor.model.state_dict().items() if not torch.equal(v, actor.initial[k])]
    assert moved

    # -- the scaffold service's step ends ----------------------------------------------------------
    assert state.reviewed_steps == (0, 1) and state.late_reports == 0 and state.open_groups == 0
    assert [e.step for e in read_events(run_dir / "events.jsonl", StepEndEvent)] == [0, 1]
    versions = [
        json.loads(p.read_text())["hash"] for p in sorted((run_dir / "scaffold" / "versions").iterdir())
    ]
    assert len(versions) >= 2, "step 0's review revised the scaffold"
    # Each step's groups played one version; step 2 played the version step 0's review wrote.
    played = [sorted(set(_versions(u["data"]))) for u in actor.updates]
    assert [len(p) for p in played] == [1, 1] and played[0] != played[1] and played[1][0] == versions[1]


@pytest.mark.parametrize("refill", [False, True], ids=["failed-groups-kept", "failed-groups-refilled"])
def test_a_service_that_stops_the_run_at_step_2_ends_verls_job_with_its_reason(
    tmp_path, monkeypatch, local_ray, refill
):
    """Step 1's review raises; with scaffold.max_failed_reviews 1 the service stops the run, so every pin
    of step 2 raises. verl's sync replay buffer only logs a loop that raises: by default it would end the
    job with its own message (no materializable trajectories), with sync_refill_failed_groups it would
    refill the failed groups forever. pats' buffer ends it with the service's reason."""
    with verl_fit(tmp_path, monkeypatch, ", max_failed_reviews: 1", refill=refill) as fit:

        async def broken(step, groups):
            raise RuntimeError("the judge broke")

        fit.service.end.scaffold.review = broken
        done: list[BaseException | None] = []

        def run() -> None:
            try:
                fit.trainer.fit(fit.loops)
                done.append(None)
            except BaseException as err:  # the test reads it below
                done.append(err)

        thread = threading.Thread(target=run, daemon=True)  # a job that never ends must not hang pytest
        thread.start()
        thread.join(timeout=180)
        assert done, "verl's job is still running three minutes after the service stopped the run"
    error = done[0]
    assert isinstance(error, TrainingError), f"{type(error).__name__}: {error}"
    assert "the judge broke" in str(error) and "1 reviews in a row" in str(error)
    assert len(fit.actor.updates) == 1, "step 1 trained; step 2 never reached the update"


def _valid(lengths, width):
    return torch.arange(width)[None, :] < lengths[:, None]


def _requests_of(server: PlanServer, step: int) -> list[list[float]]:
    """The log-probs of the trajectories the server generated at weights version step - 1."""
    return [lps for rid, lps in server.logprobs.items() if server.request_versions[rid] == step - 1]


def _versions(data) -> list[str]:
    return [fields["scaffold_version"] for fields in data["extra_fields"]]


async def _service(cfg):
    return ScaffoldService(cfg.pats.spec, cfg.pats.run_dir)
