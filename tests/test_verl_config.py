"""Spec -> verl Hydra config: composed by Hydra from verl's own ppo_trainer.yaml and passed through
verl's validate_config (rollout engine sglang: vllm cannot be imported on CPU); the export bundle."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pats.testing.verl import require_verl_or_skip, twx_verl_spec

require_verl_or_skip()
from pats.backends.verl.config import check, compose
from pats.backends.verl.export import export_verl
from pats.backends.verl.launch import write_bundle
from pats.spec import load_spec

REPO = Path(__file__).resolve().parents[1]
ALFWORLD = REPO / "experiments" / "alfworld"


def twx_spec(tmp_path: Path):
    return load_spec(twx_verl_spec(tmp_path / "spec.yaml", root=tmp_path / "runs"), ["trainer.kl_coef=0.01"])


def composed(spec, tmp_path: Path):
    overrides = write_bundle(spec, tmp_path / "bundle", run_dir=str(tmp_path / "run"), data=False)
    return overrides, compose(overrides)


VERL_SPECS = sorted(p.name for p in ALFWORLD.glob("*.yaml") if load_spec(p).trainer.backend == "verl")


def test_the_alfworld_verl_specs_are_all_found():
    assert VERL_SPECS == ["grow.yaml", "grpo.yaml", "pats.yaml", "static.yaml"]


@pytest.mark.parametrize("name", VERL_SPECS)
def test_alfworld_specs_compose_and_pass_validate_config(name, tmp_path):
    # The shipped specs say vllm; the same config with sglang is what validates on CPU.
    spec = load_spec(ALFWORLD / name, ["trainer.rollout_engine=sglang"])
    _, cfg = composed(spec, tmp_path)
    check(cfg)  # raises on any inconsistency verl itself would refuse
    arr = cfg.actor_rollout_ref
    assert cfg.algorithm.adv_estimator == "grpo"
    assert (arr.rollout.n, cfg.data.train_batch_size) == (8, 16)
    assert (cfg.data.max_prompt_length, cfg.data.max_response_length) == (2048, 25600)
    assert arr.actor.use_kl_loss is True and arr.actor.kl_loss_coef == 0.01
    assert arr.actor.optim.lr == 1.0e-6
    assert arr.model.path == "Qwen/Qwen2.5-1.5B-Instruct" and arr.model.lora_rank == 0
    assert arr.rollout.name == "sglang" and arr.rollout.multi_turn.enable is True
    assert arr.rollout.agent.default_agent_loop == "pats_agent"
    assert arr.rollout.agent.agent_loop_config_path.endswith("bundle/agent_loops.yaml")
    assert (cfg.trainer.total_training_steps, cfg.trainer.n_gpus_per_node, cfg.trainer.nnodes) == (150, 8, 1)
    assert cfg.trainer.test_freq == 10 and cfg.trainer.v1.trainer_mode == "sync"
    assert cfg.pats.spec.endswith("bundle/spec.yaml") and cfg.pats.run_dir == str(
        (tmp_path / "run").resolve()
    )
    assert cfg.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE == "offline"


def test_lora_kl_and_extra_overrides(tmp_path):
    spec = twx_spec(tmp_path)
    spec = spec.model_copy(
        update={"trainer": spec.trainer.model_copy(update={"overrides": ("trainer.save_freq=7",)})}
    )
    _, cfg = composed(spec, tmp_path)
    check(cfg)
    model = cfg.actor_rollout_ref.model
    assert (model.lora_rank, model.lora_alpha) == (16, 32)
    assert list(model.target_modules) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert cfg.actor_rollout_ref.rollout.load_format == "safetensors"
    assert cfg.trainer.save_freq == 7  # the spec's own overrides come last
    assert list(cfg.trainer.logger) == ["console"]  # wandb disabled
    assert cfg.actor_rollout_ref.rollout.val_kwargs.do_sample is False


def test_validate_config_refuses_what_verl_would_refuse(tmp_path):
    # 2 tasks x 2 rollouts = 4 sequences cannot be split over 3 GPUs: verl's own check says so.
    spec = twx_spec(tmp_path)
    spec = spec.model_copy(update={"trainer": spec.trainer.model_copy(update={"gpus_per_node": 3})})
    _, cfg = composed(spec, tmp_path)
    with pytest.raises((AssertionError, ValueError), match="divisible"):
        check(cfg)


def test_export_writes_a_recognizable_launch_script_and_task_rows(tmp_path):
    spec = load_spec(ALFWORLD / "pats.yaml")
    script = export_verl(spec, tmp_path / "alfworld", data=False).launch  # alfworld tasks need its games
    text = script.read_text()
    assert "python3 -m pats.backends.verl.main" in text
    for line in (
        "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.name=vllm",
        "actor_rollout_ref.rollout.n=8",
        '"data.train_files=$HERE/train.parquet"',
        '"actor_rollout_ref.rollout.agent.agent_loop_config_path=$HERE/agent_loops.yaml"',
        "'trainer.logger=[console,wandb]'",  # quoted: brackets are globs to bash
    ):
        assert line in text, line
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    assert "PatsValidationLoop" in (tmp_path / "alfworld" / "agent_loops.yaml").read_text()

    # twx lists its tasks without game data: check the rows through verl's own dataset class.
    import pyarrow.parquet as pq

    twx = twx_spec(tmp_path)
    export_verl(twx, tmp_path / "twx")
    train = pq.read_table(tmp_path / "twx" / "train.parquet").to_pylist()
    val = pq.read_table(tmp_path / "twx" / "val.parquet").to_pylist()
    assert [r["extra_info"]["task_id"] for r in train] == [f"twx:twc:train:{i}" for i in range(4)]
    dev = ["twx:twc:dev:10000", "twx:twc:dev:10001"]
    assert [r["extra_info"]["task_id"] for r in val] == dev + dev  # bare, then with the scaffold
    assert {r["agent_name"] for r in train} == {"pats_agent"}
    assert [(r["agent_name"], r["data_source"]) for r in val] == [("pats_validation", "pats/twx")] * 2 + [
        ("pats_validation_scaffold", "pats/twx/with_scaffold")
    ] * 2  # verl reports validation per data source: the two passes side by side (the reliance gap)
    assert "PatsScaffoldValidationLoop" in (tmp_path / "twx" / "agent_loops.yaml").read_text()
    export_verl(
        twx.model_copy(update={"eval": twx.eval.model_copy(update={"with_scaffold": False})}),
        tmp_path / "bare",
    )
    assert {r["agent_name"] for r in pq.read_table(tmp_path / "bare" / "val.parquet").to_pylist()} == {
        "pats_validation"
    }
    assert all("Guidance" not in m["content"] for r in train for m in r["prompt"])  # bare prompts


def test_cli_export_takes_spec_and_folder_and_refuses_a_local_spec(tmp_path, capsys):
    from pats.cli.main import main

    out = tmp_path / "bundle"
    assert (
        main(["export", "verl", str(ALFWORLD / "grpo.yaml"), str(out), "trainer.steps=7", "--no-data"]) == 0
    )
    assert "trainer.total_training_steps=7" in (out / "launch.sh").read_text()
    assert f"bash {out / 'launch.sh'}" in capsys.readouterr().out
    quickstart = ALFWORLD.parents[0] / "quickstart.yaml"
    assert main(["export", "verl", str(quickstart), str(tmp_path / "x")]) == 2
    assert "needs trainer.backend: verl" in capsys.readouterr().err
