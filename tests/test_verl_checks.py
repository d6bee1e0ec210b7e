"""The GPU path's checks as both routes run them (issue 59, items 15, 16 and 18), with Ray and the GPU
count stood in: `PATS_SKIP_PREFLIGHT` read by one function for `pats run`, launch.sh's check of its node
and the check of every node; the cluster's GPUs against `trainer.gpus_per_node` x `trainer.nnodes`,
refused with the override to write; `preflight: <host> (<address>): ok` printed on both routes; and
`pats plan`'s note where this machine lists fewer GPUs than a node of the spec."""

from __future__ import annotations

import pytest

from pats.testing.verl import require_verl_or_skip, twx_verl_spec

require_verl_or_skip()
from omegaconf import open_dict

from pats.backends.verl import cluster, preflight
from pats.backends.verl.cluster import check_gpus
from pats.backends.verl.launch import run_verl, write_bundle
from pats.cli.main import main
from pats.errors import PrerequisiteError
from pats.spec import load_spec
from pats.testing.verl import composed_config

NODES = "preflight: gpu-node-1 (10.0.0.1), gpu-node-2 (10.0.0.2): ok"


class Started(Exception):
    """Stands in for verl's run_ppo: the run got past every check."""


def gpus_config(tmp_path, nnodes: int, per_node: int):
    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"))
    config = composed_config(spec, tmp_path)
    with open_dict(config):
        config.trainer.nnodes, config.trainer.n_gpus_per_node = nnodes, per_node
    return config


def refusal(config, gpus) -> str:
    with pytest.raises(PrerequisiteError) as err:
        check_gpus(config, gpus)
    return str(err.value)


def test_the_clusters_gpus_are_checked_against_the_run_with_the_override_to_write(tmp_path):
    one_node_of_8 = gpus_config(tmp_path, nnodes=1, per_node=8)
    check_gpus(one_node_of_8, [8.0])
    check_gpus(one_node_of_8, [0.0, 8.0])  # a head node without GPUs beside the GPU node
    # `pats run experiments/alfworld/pats.yaml` on one GPU: 8 asked, 1 seen.
    said = refusal(one_node_of_8, [1.0])
    assert said == (
        "the Ray cluster has 1 GPU(s) over 1 node(s) (per node: 1) and the run asks for 1 node(s) x 8 GPU(s) "
        "(the spec's trainer.nnodes x trainer.gpus_per_node), which verl places as 8 GPU(s) on each of 1 "
        "node(s): write the spec override trainer.gpus_per_node=1 (`pats run SPEC trainer.gpus_per_node=1`, "
        "or `pats export verl SPEC OUT trainer.gpus_per_node=1` for a new bundle; `pats plan SPEC "
        "trainer.gpus_per_node=1` plans it), or after `bash launch.sh` the verl overrides "
        "trainer.n_gpus_per_node=1"
    )
    # 8 GPUs in all, but no node holds 8: verl places each node's share on one node.
    assert "write the spec override trainer.gpus_per_node=4 trainer.nnodes=2 (" in refusal(
        one_node_of_8, [4.0, 4.0]
    )
    assert "trainer.gpus_per_node=4 trainer.nnodes=2 (" in refusal(one_node_of_8, [4.0, 2.0, 4.0])
    two_nodes_of_4 = gpus_config(tmp_path / "b", nnodes=2, per_node=4)
    check_gpus(two_nodes_of_4, [4.0, 4.0])
    said = refusal(two_nodes_of_4, [4.0, 2.0])  # 4 on one node, or 2 on each of both: the spec's 2 nodes
    assert "asks for 2 node(s) x 4 GPU(s)" in said and "trainer.gpus_per_node=2 (" in said
    said = refusal(two_nodes_of_4, [4.0])
    assert (
        "trainer.gpus_per_node=4 trainer.nnodes=1 (" in said and "n_gpus_per_node=4 trainer.nnodes=1" in said
    )
    said = refusal(two_nodes_of_4, [0.0])
    assert said.startswith("Ray sees no GPU in this cluster (1 node(s))") and "trainer.backend: local" in said


def test_the_gpu_refusals_read_whole_with_each_nodes_count(tmp_path):
    """Both refusals whole: the count per node listed for several nodes (a node without GPUs among
    them), and the one for a cluster without any GPU."""
    two_nodes_of_4 = gpus_config(tmp_path, nnodes=2, per_node=4)
    assert refusal(two_nodes_of_4, [4.0, 2.0, 0.0]) == (
        "the Ray cluster has 6 GPU(s) over 3 node(s) (per node: 4, 2, 0) and the run asks for 2 node(s) x 4 "
        "GPU(s) (the spec's trainer.nnodes x trainer.gpus_per_node), which verl places as 4 GPU(s) on each of "
        "2 node(s): write the spec override trainer.gpus_per_node=2 (`pats run SPEC trainer.gpus_per_node=2`, "
        "or `pats export verl SPEC OUT trainer.gpus_per_node=2` for a new bundle; `pats plan SPEC "
        "trainer.gpus_per_node=2` plans it), or after `bash launch.sh` the verl overrides "
        "trainer.n_gpus_per_node=2"
    )
    assert refusal(two_nodes_of_4, [0.0, 0.0]) == (
        "Ray sees no GPU in this cluster (2 node(s)) and the run asks for 2 node(s) x 4 GPU(s) (the spec's "
        "trainer.nnodes x trainer.gpus_per_node): verl trains on NVIDIA GPUs; check `nvidia-smi` and "
        "CUDA_VISIBLE_DEVICES on the nodes, or on a machine without a GPU use trainer.backend: local"
    )


def test_node_gpus_counts_each_alive_node_of_ray_a_node_without_gpus_as_0(monkeypatch):
    """What check_cluster puts against the run: Ray's GPU count on each alive node, in Ray's order."""
    import ray

    nodes = [
        {"Alive": True, "Resources": {"CPU": 64.0, "GPU": 8.0}},
        {"Alive": False, "Resources": {"CPU": 64.0, "GPU": 8.0}},  # a node that left the cluster
        {"Alive": True, "Resources": {"CPU": 16.0}},  # a head node without GPUs
        {"Alive": True, "Resources": {"GPU": 2.0}},
    ]
    monkeypatch.setattr(ray, "nodes", lambda: nodes)
    assert cluster.node_gpus() == [8.0, 0.0, 2.0]


def test_the_skip_variable_is_refused_with_the_values_it_takes():
    assert preflight.skipped({}) == frozenset() == preflight.skipped({"PATS_SKIP_PREFLIGHT": "0"})
    assert preflight.skipped({"PATS_SKIP_PREFLIGHT": "head"}) == {"head"}
    assert preflight.skipped({"PATS_SKIP_PREFLIGHT": "1"}) == {"head"}
    assert preflight.skipped({"PATS_SKIP_PREFLIGHT": "all"}) == {"head", "nodes"}
    with pytest.raises(PrerequisiteError) as err:
        preflight.skipped({"PATS_SKIP_PREFLIGHT": "yes"})
    assert str(err.value) == (
        "PATS_SKIP_PREFLIGHT='yes' is not a value pats reads; the values it reads: head (skip the launching "
        "node's own check, e.g. a head node without GPUs; every node of the Ray cluster is still checked), "
        "all (no check at all), 1 (the same as head), 0 or unset (every check)"
    )


def test_launch_shs_check_of_its_node_reads_the_variable_itself(monkeypatch, capsys):
    """launch.sh always runs the preflight module, which skips or refuses by `skipped`: the overrides
    below would not even compose, so a skip never composes."""
    for value in ("head", "1", "all"):
        monkeypatch.setenv("PATS_SKIP_PREFLIGHT", value)
        assert preflight.main(["no_such_key=1"]) == 0
        assert (
            capsys.readouterr().out == f"preflight: this node is not checked (PATS_SKIP_PREFLIGHT={value})\n"
        )
    monkeypatch.setenv("PATS_SKIP_PREFLIGHT", "yes")
    assert preflight.main(["no_such_key=1"]) == PrerequisiteError.exit_code
    assert "the values it reads: head" in capsys.readouterr().err


@pytest.fixture
def stand_ins(monkeypatch):
    """Ray, the GPU count, the nodes' preflight and verl's run_ppo stood in; records the launching
    node's check (`checked`)."""
    checked: list[str] = []
    monkeypatch.setattr(cluster, "init_ray", lambda config, spec: None)
    monkeypatch.setattr(cluster, "node_gpus", lambda: [1.0])
    monkeypatch.setattr(
        cluster, "node_preflight", lambda config, path: ["gpu-node-1 (10.0.0.1)", "gpu-node-2 (10.0.0.2)"]
    )

    def run_ppo(config, task_runner_class):
        raise Started

    monkeypatch.setattr("verl.trainer.main_ppo.run_ppo", run_ppo)
    monkeypatch.setattr("pats.backends.verl.launch.check_node", lambda config: checked.append("head"))
    return checked


def test_pats_run_reads_the_skip_variable_and_prints_the_nodes_line(tmp_path, monkeypatch, capsys, stand_ins):
    """`PATS_SKIP_PREFLIGHT=all pats run` refused this node before (only launch.sh read it); a bogus
    value is refused before anything is written."""
    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"))
    monkeypatch.setattr(preflight, "import_error", lambda name: None)  # flash_attn imports "here"
    attention = "verl: attention flash_attention_2 (flash_attn imports here)"
    for value, head_checked, nodes_line in (
        ("0", True, NODES),
        ("head", False, NODES),
        ("all", False, "preflight: the nodes of the Ray cluster are not checked (PATS_SKIP_PREFLIGHT=all)"),
    ):
        stand_ins.clear()
        monkeypatch.setenv("PATS_SKIP_PREFLIGHT", value)
        with pytest.raises(Started):
            run_verl(spec, tmp_path / value)
        # pats' own lines (verl's validate_config prints its own between them)
        out = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("verl:", "preflight:"))]
        assert stand_ins == (["head"] if head_checked else [])
        skip_line = (
            [] if head_checked else [f"preflight: this node is not checked (PATS_SKIP_PREFLIGHT={value})"]
        )
        assert out == [attention, *skip_line, nodes_line], "the lines read whole"
    monkeypatch.setenv("PATS_SKIP_PREFLIGHT", "yes")
    with pytest.raises(PrerequisiteError, match="the values it reads: head"):
        run_verl(spec, tmp_path / "yes")
    assert not (tmp_path / "yes").exists()


def test_pats_run_says_what_to_write_where_its_check_of_the_node_refuses(tmp_path, monkeypatch, stand_ins):
    """The node is checked on the config composed from the bundle pats run writes in the run's verl/."""

    def refuse(config):
        spec = config.pats.spec  # the bundle's copy of the spec
        raise PrerequisiteError(
            f"preflight: this node cannot run the verl config of {spec}:\n  - a CPU build"
        )

    monkeypatch.setattr("pats.backends.verl.launch.check_node", refuse)
    monkeypatch.delenv("PATS_SKIP_PREFLIGHT", raising=False)
    with pytest.raises(PrerequisiteError) as err:
        run_verl(load_spec(twx_verl_spec(tmp_path / "spec.yaml")), tmp_path / "run")
    assert (tmp_path / "run" / "verl" / "launch.sh").is_file()
    assert str(err.value) == (
        f"preflight: this node cannot run the verl config of {tmp_path / 'run' / 'verl' / 'spec.yaml'}:\n"
        "  - a CPU build\nOn a machine "
        "without a GPU use trainer.backend: local, or export the run for a GPU node with `pats export verl "
        "SPEC OUT/`"
    )


def test_launch_shs_main_prints_the_same_nodes_line(tmp_path, monkeypatch, capsys, stand_ins):
    from pats.backends.verl import main as verl_main

    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"))
    overrides = write_bundle(spec, tmp_path / "bundle", run_dir=str(tmp_path / "run"), data=False)
    monkeypatch.setattr(preflight, "import_error", lambda name: None)  # flash_attn imports "here"
    attention = "preflight: attention flash_attention_2 (flash_attn imports here)"
    for value, nodes_line in (
        (None, NODES),
        ("all", "preflight: the nodes of the Ray cluster are not checked (PATS_SKIP_PREFLIGHT=all)"),
    ):
        if value is None:
            monkeypatch.delenv("PATS_SKIP_PREFLIGHT", raising=False)
        else:
            monkeypatch.setenv("PATS_SKIP_PREFLIGHT", value)
        with pytest.raises(Started):
            verl_main.run(overrides)
        out = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(("verl:", "preflight:"))]
        assert out == [attention, nodes_line], "the lines read whole"
    monkeypatch.setenv("PATS_SKIP_PREFLIGHT", "yes")  # refused before anything starts
    with pytest.raises(PrerequisiteError, match="the values it reads: head"):
        verl_main.run(overrides)
    assert capsys.readouterr().out == ""
    monkeypatch.delenv("PATS_SKIP_PREFLIGHT")
    monkeypatch.setattr(cluster, "node_gpus", lambda: [0.0])  # the GPU count is checked there too
    with pytest.raises(PrerequisiteError, match="Ray sees no GPU"):
        verl_main.run(overrides)


def test_both_paths_set_the_device_to_this_platforms_as_main_ppo_does(tmp_path, monkeypatch, stand_ins):
    """verl's auto_set_device on the composed config before run_ppo (a trainer.device that names another
    accelerator becomes this platform's), as main_ppo does."""
    from verl.utils.device import get_platform

    from pats.backends.verl import main as verl_main

    platform = get_platform().device_name
    if platform == "cpu":
        pytest.skip("verl sets no device on a CPU platform")
    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"))
    config = gpus_config(tmp_path, nnodes=1, per_node=1)
    config.trainer.device = "npu"
    given = []
    monkeypatch.setattr(
        "verl.trainer.main_ppo.run_ppo", lambda config, task_runner_class: given.append(config)
    )
    verl_main.train(config, spec, frozenset({"head", "nodes"}))
    assert [c.trainer.device for c in given] == [platform]


def test_pats_plan_notes_fewer_gpus_here_than_a_node_of_the_spec(tmp_path, monkeypatch, capsys):
    spec = twx_verl_spec(tmp_path / "spec.yaml")
    h100 = preflight.Gpu("NVIDIA H100 80GB HBM3", 81559, "580.95.05")
    monkeypatch.setattr(preflight, "nvidia_gpus", lambda: [h100])
    assert main(["plan", str(spec), "trainer.gpus_per_node=2", "trainer.tasks_per_step=4"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "note: nvidia-smi lists 1 GPU(s) on this machine and the plan is for 1 node(s) x 2 GPU(s): a run "
        "here needs trainer.gpus_per_node=1 (`pats plan SPEC trainer.gpus_per_node=1` plans that), else the "
        "preflight refuses it"
    )
    for gpus in ([h100], []):  # enough here, or no GPU listed (a machine planning for another): no note
        monkeypatch.setattr(preflight, "nvidia_gpus", lambda gpus=gpus: gpus)
        assert main(["plan", str(spec)]) == 0
        assert "note: nvidia-smi" not in capsys.readouterr().out
