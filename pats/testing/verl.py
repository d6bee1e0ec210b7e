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
