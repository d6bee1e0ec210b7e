"""Ray for a verl run, on a local Ray (pats.backends.verl.cluster): the variables a run needs reach the
Ray workers from the launching environment and no file or config, and so do verl's own switches (the
determinism ones run_ppo sets from the config, every VERL_* variable); a local Ray pats starts gets the
logical CPUs the run holds; a cluster with too few is refused with the count; the preflight runs as a
Ray task on each node, and skipping the launching node's own check (PATS_SKIP_PREFLIGHT=head, or 1)
still runs it."""

from __future__ import annotations

import os
import socket

import pytest

from pats.testing.verl import composed_config, require_verl_or_skip, twx_verl_spec

require_verl_or_skip()
import ray
from omegaconf import OmegaConf, open_dict

from pats.backends.verl import cluster
from pats.backends.verl.cluster import check_cpus, cpus_needed, init_ray, node_preflight
from pats.backends.verl.launch import write_bundle
from pats.errors import PrerequisiteError
from pats.spec import load_spec

pytestmark = pytest.mark.slow  # local Ray (~10 s to start)

SECRETS = {
    "HF_TOKEN": "hf-test-secret-1",
    "WANDB_API_KEY": "wandb-test-secret-2",
    "OPENAI_API_KEY": "sk-test-secret-3",  # the llm judge's key variable
    "HF_HOME": "/scratch/hf-home",
}


def llm_spec(tmp_path):
    path = twx_verl_spec(
        tmp_path / "spec" / "spec.yaml", "judge: {kind: llm, llm: {model: openai/gpt-4o-mini}}"
    )
    spec = load_spec(path)
    return spec, composed_config(spec, tmp_path)


def small_ray(cfg, cpus: int, gpus: int = 0) -> None:
    """Test-only: the Ray verl would start, kept small (the logical counts are what verl asks for)."""
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.num_cpus = cpus
        cfg.ray_kwargs.ray_init.num_gpus = gpus
        cfg.ray_kwargs.ray_init.object_store_memory = 200 * 1024**2
        cfg.ray_kwargs.ray_init.include_dashboard = False
        cfg.transfer_queue.backend.SimpleStorage.num_data_storage_units = 1


def test_the_run_variables_reach_ray_workers_and_no_file(tmp_path, monkeypatch, capsys):
    for name in SECRETS:
        monkeypatch.delenv(name, raising=False)  # Ray's processes must not inherit them from here
    spec, cfg = llm_spec(tmp_path)
    small_ray(cfg, cpus=6)
    assert not ray.is_initialized(), "another test left Ray running"
    try:
        init_ray(cfg, spec, environ={**SECRETS, "UNRELATED_VARIABLE": "x"})

        @ray.remote(num_cpus=0)
        def worker_env() -> dict[str, str | None]:
            return {name: os.environ.get(name) for name in [*SECRETS, "UNRELATED_VARIABLE"]}

        seen = ray.get(worker_env.remote())
        # The preflight on every node: this one has no GPU, pats and verl 0.9.1, the spec's files.
        assert node_preflight(cfg, str(cfg.pats.spec)) == [f"{socket.gethostname()} ({_address()})"]
        missing = twx_verl_spec(
            tmp_path / "other" / "spec.yaml", scaffold="probe_fraction: 0.5, initial_bank: /nowhere/bank.json"
        )
        with pytest.raises(PrerequisiteError) as refused:
            node_preflight(cfg, str(missing))
    finally:
        ray.shutdown()
    assert seen == {**SECRETS, "UNRELATED_VARIABLE": None}
    assert socket.gethostname() in str(refused.value)
    assert "scaffold.initial_bank: /nowhere/bank.json does not exist" in str(refused.value)
    printed = capsys.readouterr().out
    assert "ray init kwargs" in printed and "HF_TOKEN" in printed
    # Never written: not in what was printed, the config verl logs, or any file of the bundle.
    config_text = OmegaConf.to_yaml(cfg, resolve=True)
    for value in SECRETS.values():
        assert value not in printed and value not in config_text
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert value not in path.read_text(errors="replace"), path


def test_a_gpu_node_of_the_cluster_is_checked_where_it_runs(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the refusal below is for a CPU build of torch")
    spec, cfg = llm_spec(tmp_path)
    small_ray(cfg, cpus=6, gpus=1)  # a fake GPU: Ray schedules on it, torch here cannot use it
    assert not ray.is_initialized(), "another test left Ray running"
    try:
        init_ray(cfg, spec, environ={})
        with pytest.raises(PrerequisiteError) as refused:
            node_preflight(cfg, str(cfg.pats.spec))
    finally:
        ray.shutdown()
    message = str(refused.value)
    assert f"{socket.gethostname()} (" in message and "is a CPU build" in message


def test_too_few_logical_cpus_for_verls_placement_are_refused_with_the_count(tmp_path):
    _, cfg = llm_spec(tmp_path)
    with open_dict(cfg):
        cfg.trainer.n_gpus_per_node = 8  # what trainer.gpus_per_node: 8 sets
    # 8 GPUs: 3 CPUs with each in verl's pools, the TransferQueue's controller and 8 storage units, and
    # one to schedule the actors created after the pools.
    assert sum(cpus_needed(cfg).values()) == 8 * 3 + 1 + 8 + 1 == 34
    check_cpus(cfg, {"CPU": 34.0, "GPU": 8.0})
    with pytest.raises(PrerequisiteError) as refused:
        check_cpus(cfg, {"CPU": 32.0, "GPU": 8.0})
    message = str(refused.value)
    assert "has 32 logical CPUs and verl needs 34" in message and "--num-cpus=34" in message
    # What test_verl_run_ppo found on a local Ray: one GPU, one storage unit: 6 CPUs place, 4 wait forever.
    small_ray(cfg, cpus=6)
    with open_dict(cfg):
        cfg.trainer.n_gpus_per_node = 1
    assert sum(cpus_needed(cfg).values()) == 6


def _address() -> str:
    return next(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"])


SWITCHES = (
    "VERL_FULL_DETERMINISM",
    "VLLM_BATCH_INVARIANT",
    "PYTHONHASHSEED",
    "VERL_LOGGING_LEVEL",
    "NCCL_ALGO",
)


def test_verls_switches_reach_ray_workers(tmp_path, monkeypatch):
    """run_ppo sets the determinism switches from rollout.full_determinism only after pats has started
    Ray: pats puts them in the runtime env itself, with every VERL_* variable of the launching shell."""
    for name in SWITCHES:
        monkeypatch.delenv(name, raising=False)  # Ray's processes must not inherit them from here
    spec, cfg = llm_spec(tmp_path)
    small_ray(cfg, cpus=6)
    with open_dict(cfg):
        cfg.actor_rollout_ref.rollout.full_determinism = True
        cfg.actor_rollout_ref.rollout.seed = 7
    assert not ray.is_initialized(), "another test left Ray running"
    try:
        init_ray(cfg, spec, environ={"VERL_LOGGING_LEVEL": "DEBUG", "NCCL_ALGO": "Ring"})

        @ray.remote(num_cpus=0)
        def worker_env() -> dict[str, str | None]:
            return {name: os.environ.get(name) for name in SWITCHES}

        seen = ray.get(worker_env.remote())
    finally:
        ray.shutdown()
    assert seen == {
        "VERL_FULL_DETERMINISM": "1",
        "VLLM_BATCH_INVARIANT": "1",
        "PYTHONHASHSEED": "7",  # the rollout's seed, as run_ppo sets it
        "VERL_LOGGING_LEVEL": "DEBUG",
        "NCCL_ALGO": "Ring",
    }


def test_a_local_ray_pats_starts_holds_the_cpus_the_run_needs(tmp_path, monkeypatch, capsys):
    """One GPU node without `ray start`: a machine with fewer cores than the run holds at once gets a
    local Ray with that many logical CPUs (verl would wait for placement forever with fewer)."""
    spec, cfg = llm_spec(tmp_path)
    small_ray(cfg, cpus=6)
    with open_dict(cfg):
        cfg.ray_kwargs.ray_init.num_cpus = None  # as verl's config has it
    monkeypatch.setattr(cluster, "_cores", lambda: 2)  # the machine, as Ray counts it
    assert sum(cpus_needed(cfg).values()) == 6  # one GPU x 3, the queue's controller and storage unit, 1
    assert not ray.is_initialized(), "another test left Ray running"
    try:
        init_ray(cfg, spec, environ={})  # refuses with the count if Ray got fewer
        cpus = ray.cluster_resources()["CPU"]
    finally:
        ray.shutdown()
    assert cpus == 6
    assert "a local Ray with 6 logical CPUs" in capsys.readouterr().out


def test_skipping_the_heads_preflight_still_checks_every_node(tmp_path, monkeypatch):
    """`PATS_SKIP_PREFLIGHT=head` (and 1, what the docs gave for a head node without GPUs) skips only
    launch.sh's check of the launching node: pats.backends.verl.main still checks every node of the
    cluster, and refuses this one, which Ray counts a GPU on and whose torch is a CPU build. Only `all`
    lets verl's run_ppo start unchecked."""
    import torch

    from pats.backends.verl import main as verl_main

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: the refusal below is for a CPU build of torch")
    spec = load_spec(twx_verl_spec(tmp_path / "spec" / "spec.yaml"))
    overrides = [
        *write_bundle(spec, tmp_path / "bundle", run_dir=str(tmp_path / "run"), data=False),
        "transfer_queue.backend.SimpleStorage.num_data_storage_units=1",  # 6 logical CPUs place the run
    ]
    started = []
    monkeypatch.setattr("verl.trainer.main_ppo.run_ppo", lambda config, task_runner_class: started.append(1))
    assert not ray.is_initialized(), "another test left Ray running"
    ray.init(num_cpus=6, num_gpus=1, object_store_memory=200 * 1024**2, include_dashboard=False)
    try:
        for value in ("head", "1", "0"):
            monkeypatch.setenv("PATS_SKIP_PREFLIGHT", value)
            with pytest.raises(PrerequisiteError) as refused:
                verl_main.run(overrides)
            message = str(refused.value)
            assert "a node of the Ray cluster cannot run" in message and "is a CPU build" in message
        assert started == []
        monkeypatch.setenv("PATS_SKIP_PREFLIGHT", "all")
        verl_main.run(overrides)
        monkeypatch.setenv("PATS_SKIP_PREFLIGHT", "yes")
        with pytest.raises(PrerequisiteError, match="the values it reads: head"):
            verl_main.run(overrides)
    finally:
        ray.shutdown()
    assert started == [1]
