"""Where verl's own entry point, `run_ppo(config, task_runner_class=TaskRunnerV1)` (what `pats run`
calls for `trainer.backend: verl`), stops on a CPU machine: docs/verl.md, "What has run where".

With a fake GPU resource in local Ray, TaskRunnerV1 builds the dataset and the trainer from pats'
exported bundle, places the worker pools, and stops when the actor worker group's `init_model` opens
verl's process group with NCCL, which a CPU build of torch does not have. If a verl or torch release
gets further (or stops earlier), this test fails: update docs/verl.md with where it stops now.
"""

from __future__ import annotations

import pytest

from pats.testing.verl import require_verl_or_skip

require_verl_or_skip()
import ray
from omegaconf import open_dict
from test_verl_v1 import spec_file
from verl.trainer.main_ppo import TaskRunnerV1, run_ppo

from pats.backends.verl.config import compose
from pats.backends.verl.launch import write_bundle
from pats.spec import load_spec

pytestmark = pytest.mark.slow  # local Ray with worker processes that import verl (~1 min)


def test_run_ppo_reaches_the_worker_groups_init_model_and_stops_at_nccl(tmp_path):
    spec = load_spec(spec_file(tmp_path))
    cfg = compose(write_bundle(spec, tmp_path / "bundle", run_dir=str(tmp_path / "run")))
    with open_dict(cfg):  # as in test_verl_v1: one storage actor, the dataset read in-process
        cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1
        cfg.data.dataloader_num_workers = 0
    assert not ray.is_initialized(), "another test left Ray running"
    # A fake GPU, so that the pools can be placed; 6 logical CPUs: the pool's bundle asks for 3 beside
    # the task runner and the two TransferQueue actors (with 4 the placement group waits forever).
    ray.init(num_cpus=6, num_gpus=1, object_store_memory=200 * 1024**2, include_dashboard=False)
    try:
        with pytest.raises(Exception) as caught:
            run_ppo(cfg, task_runner_class=TaskRunnerV1)
    finally:
        ray.shutdown()
    trace = str(caught.value)
    # The dataset and trainer were built and the pools placed: the stop is inside init_model.
    assert "self.trainer.init()" in trace and "init_model" in trace, trace[-3000:]
    assert "engine_workers.py" in trace and "initialize_global_process_group" in trace, trace[-3000:]
    assert "Distributed package doesn't have NCCL built in" in trace, trace[-3000:]
