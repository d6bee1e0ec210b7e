"""Helpers for tests of the verl backend: the module-level verl check, a tiny verl spec on twc, the
config verl composes from a spec, and verl's agent-loop worker wired to an in-process scaffold service."""

from __future__ import annotations

import os
from pathlib import Path


def require_verl_or_skip() -> None:
    """Call at module level: without verl the module is skipped, except under CI, which installs
    `.[verl]` (`./scripts/install --test`), so a missing verl fails there instead of hiding."""
    import pytest

    from pats.backends.verl.config import require_verl

    try:
        require_verl()
    except Exception as err:  # PrerequisiteError naming the install command
        if os.environ.get("CI"):
            raise
        pytest.skip(f"verl not installed: {err}", allow_module_level=True)


def twx_verl_spec(
    path: Path, *extra: str, scaffold: str = "probe_fraction: 0.5", root: Path | None = None
) -> Path:
    """Write a small verl spec on twc (4 training tasks, 2 held-out, 4 turns) to `path`; `extra` lines
    are appended (a later key wins), `root` is logging.root (default: beside the file)."""
    text = "\n".join(
        [
            "name: verl-twx",
            "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},",
            "  num_train_tasks: 4, num_eval_tasks: 2, max_turns: 4}",
            "policy: {max_new_tokens: 24}",
            f"scaffold: {{{scaffold}}}",
            "trainer: {backend: verl, max_prompt_tokens: 512, max_response_tokens: 1024, steps: 3,",
            "  tasks_per_step: 2, group_size: 2, nnodes: 1,",
            "  gpus_per_node: 1, rollout_engine: sglang, micro_batch_per_gpu: 1}",
            f"logging: {{root: {root or path.parent / 'runs'}, wandb: disabled}}",
            *extra,
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")
    return path


def rows_batch(rows: list[dict], step: int = 1, uid_prefix: str = ""):
    """Task rows (pats.backends.verl.data.task_rows) as the DataProto verl's dataset and trainer hand
    to the agent loops at `global_steps` = step; rows with the same loop and task share a uid (a group)."""
    import numpy as np
    from verl.protocol import DataProto

    columns = {
        "raw_prompt": [r["prompt"] for r in rows],
        "extra_info": [r["extra_info"] for r in rows],
        "agent_name": [r["agent_name"] for r in rows],
        "data_source": [r["data_source"] for r in rows],
        "index": [r["extra_info"]["index"] for r in rows],
        "uid": [f"{uid_prefix}{r['agent_name']}-{r['extra_info']['task_id']}" for r in rows],
        "global_steps": [step] * len(rows),
    }
    non_tensor = {}
    for key, values in columns.items():
        non_tensor[key] = np.empty(len(rows), dtype=object)
        non_tensor[key][:] = values
    return DataProto(batch=None, non_tensor_batch=non_tensor, meta_info={})


def composed_config(spec, folder: Path):
    """verl's config for `spec` as `pats run` composes it: the bundle written to folder/bundle (no
    data files), the run directory folder/run."""
    from pats.backends.verl.config import compose
    from pats.backends.verl.launch import write_bundle

    return compose(write_bundle(spec, folder / "bundle", run_dir=str(folder / "run"), data=False))


async def expert_task(env, split: str = "train"):
    """(the first `split` task of `env`, its expert plan); closes `env`."""
    task = env.tasks(split)[0]
    plan = env.expert_plan(task)
    await env.close()
    return task, plan


def loop_worker(cfg, monkeypatch, server_manager=None):
    """(service, worker): verl's AgentLoopWorker on `cfg`, whose pats loops reach a ScaffoldService
    over the config's spec and run directory in this process (`connect` patched) instead of the Ray
    actor; `server_manager` answers the turns (tests usually set `worker.llm_client` instead)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker

    import pats.backends.verl.loop as loop_module
    from pats.backends.verl.service import ScaffoldService

    service = ScaffoldService(cfg.pats.spec, cfg.pats.run_dir)
    monkeypatch.setattr(loop_module, "connect", lambda spec_path, run_dir: service)
    return service, AgentLoopWorker(cfg, server_manager)


# -- verl's V1 sync trainer on the CPU (tests/test_verl_v1.py) -----------------------------------------
# Stand-ins for the parts of a verl run that need GPUs: the rollout server, the training worker group
# and the weight sync between them. Everything else (the trainer, its dataset and replay buffer, the
# TransferQueue, the agent-loop worker, the advantage) is verl's own.


class PlanServer:
    """verl's LLM server client, scripted: of the trajectories that start from the same prompt (a
    group), the first plays `plan` (a win), the others repeat `look around` (they fail). Like verl's
    `LLMServerClient.generate`, each output carries the weights version it was generated with
    (`extra_fields` global_steps, min_global_steps, max_global_steps); `version` is set by
    `StandInCheckpointManager.update_weights`. Log-probs differ per token, all finite and negative."""

    def __init__(self, tokenizer, plans: dict[str, list[str]]):
        self.tokenizer, self.plans = tokenizer, plans  # text found in a first prompt -> its plan
        self.version: int | None = None
        self.starts: set[tuple[int, ...]] = set()
        self.roles: dict[str, list[str] | None] = {}  # request id -> the plan it plays, or None
        self.turns: dict[str, int] = {}
        self.logprobs: dict[str, list[float]] = {}
        self.request_versions: dict[str, int | None] = {}  # request id -> the version it started on
        self.unmatched: list[str] = []  # first prompts no plan matched

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        if request_id not in self.roles:
            text = self.tokenizer.decode(prompt_ids)
            plan = next((p for key, p in self.plans.items() if key in text), None)
            if plan is None:  # a test's mistake; raising here would make verl retry the group forever
                self.unmatched.append(text)
            first = tuple(prompt_ids) not in self.starts
            self.starts.add(tuple(prompt_ids))
            self.roles[request_id] = plan if first else None
            self.request_versions[request_id] = self.version
        k = self.turns[request_id] = self.turns.get(request_id, -1) + 1
        plan = self.roles[request_id]
        action = plan[k] if plan is not None and k < len(plan) else "look around"
        ids = self.tokenizer(f"<action>{action}</action>", add_special_tokens=False)["input_ids"]
        ids = ids + [self.tokenizer.eos_token_id]
        logps = [-0.1 - 0.01 * ((k + j) % 7) for j in range(len(ids))]
        self.logprobs.setdefault(request_id, []).extend(logps)
        versions = {"global_steps": self.version, "min_global_steps": self.version}
        versions["max_global_steps"] = self.version
        return TokenOutput(token_ids=ids, log_probs=logps, stop_reason="completed", extra_fields=versions)


class StandInCheckpointManager:
    """verl's CheckpointEngineManager for the sync trainer: `update_weights(global_steps)` after each
    step (the rollout server now serves that version), `sleep_replicas()` after each sampling."""

    def __init__(self, server: PlanServer):
        self.server = server
        self.calls: list[tuple[str, int | None]] = []

    def update_weights(self, global_steps: int) -> None:
        self.calls.append(("update_weights", global_steps))
        self.server.version = global_steps

    def sleep_replicas(self) -> None:
        self.calls.append(("sleep_replicas", None))


class InProcessAgentLoops:
    """verl's AgentLoopManagerTQ with one AgentLoopWorkerTQ, run in this process on its own event-loop
    thread (a Ray actor has its own loop too): `generate_sequences` hands the batch over and returns
    at once, the worker's loops put their outputs into the TransferQueue."""

    def __init__(self, config, server):
        import asyncio
        import threading

        from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, name="agent-loops", daemon=True).start()
        # @ray.remote made the class a Ray ActorClass; its plain class, which runs here without a Ray
        # actor, is kept as __ray_actor_class__, an attribute Ray sets at run time and does not declare.
        plain = AgentLoopWorkerTQ.__ray_actor_class__  # type: ignore[attr-defined]
        self.worker = self.call(self._build(plain, config, server))
        self.batches = []  # what the trainer handed over, step after step

    @staticmethod
    async def _build(cls, config, server):
        return cls(config, server)  # inside the loop: the worker's tasks belong to it

    def call(self, coroutine):
        import asyncio

        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def generate_sequences(self, batch) -> None:
        self.batches.append(batch)
        self.call(self.worker.generate_sequences(batch))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)


class StandInActor:
    """verl's actor worker group (one data-parallel rank) without its FSDP engine: `compute_log_prob`
    and `update_actor` take the trainer's KVBatchMeta through verl's own TransferQueue bridge
    (`tqbridge`, what `@register` wraps worker methods with) and answer as the engine does: log-probs
    in the no-padding layout (per row, prompt then response, entry t = log p(token t+1)), and an
    update that calls verl's `ppo_loss` on the batch it read. The model is a tiny random Llama over
    token ids modulo `VOCAB`: its quality is irrelevant, its log-probs and gradients are real.
    `updates` keeps, per update, the batch's fields the loss reads and the loss."""

    VOCAB = 512

    def __init__(self, actor_config):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        from verl.utils.transferqueue_utils import tqbridge

        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=self.VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
            num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
        )  # fmt: skip
        self.model = LlamaForCausalLM(config).float()
        self.actor_config = actor_config
        self._dispatch_info = {"actor": [0]}  # one data-parallel rank (what _balance_batch queries)
        self.updates: list[dict] = []
        self.compute_log_prob = tqbridge()(self._compute_log_prob)
        self.compute_ref_log_prob = self.compute_log_prob  # the reference is the initial policy here
        self.update_actor = tqbridge()(self._update_actor)
        self.initial = {k: v.detach().clone() for k, v in self.model.state_dict().items()}

    def _log_probs(self, input_ids):
        """(total tokens,) the no-padding layout verl's engine returns, from nested `input_ids`."""
        import torch

        out = []
        for ids in input_ids.unbind():
            ids = ids % self.VOCAB
            logits = self.model(input_ids=ids[None]).logits[0, :-1].float()
            logp = torch.log_softmax(logits, -1).gather(-1, ids[1:, None])[:, 0]
            out.append(torch.cat([logp, logp.new_zeros(1)]))
        return torch.cat(out)

    def _nested(self, flat, input_ids):
        import torch

        lengths = input_ids.offsets().diff().tolist()
        return torch.nested.as_nested_tensor(list(flat.split(lengths)), layout=torch.jagged)

    def _compute_log_prob(self, data):
        import torch
        from verl.utils import tensordict_utils as tu

        with torch.no_grad():
            flat = self._log_probs(data["input_ids"])
        nested = self._nested(flat, data["input_ids"])
        return tu.get_tensordict({"log_probs": nested, "entropy": self._nested(-flat, data["input_ids"])})

    def _update_actor(self, data):
        import torch
        from verl.utils import tensordict_utils as tu
        from verl.workers.utils.losses import ppo_loss

        mask = data["response_mask"]
        # What verl's engine worker adds before the loss (TrainingWorker.train_mini_batch, one rank).
        global_batch = tu.get_non_tensor_data(data, "global_batch_size", None)
        tu.assign_non_tensor(
            data, dp_size=1, batch_num_tokens=int(mask.values().sum()), global_batch_size=global_batch
        )
        log_probs = self._log_probs(data["input_ids"])
        loss, metrics = ppo_loss(self.actor_config, {"log_probs": log_probs}, data)
        self.model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in self.model.parameters():
                if p.grad is not None:
                    p -= 0.05 * p.grad
        self.updates.append({"data": data, "loss": float(loss.detach()), "metrics": metrics})
        return tu.get_tensordict({}, non_tensor_dict={"metrics": {"mfu": [0.0], "pg_loss": [float(loss)]}})
