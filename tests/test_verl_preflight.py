"""The preflight (pats.backends.verl.preflight): what a composed verl config needs on the node that runs
it. Each prerequisite is taken away in turn (the probes are replaced) and its refusal names the fix; with
all present the node passes. `pats run` refuses this CPU machine through it, and the SDPA alternative it
names keeps remove-padding's packed sequences apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from pats.testing.verl import require_verl_or_skip, twx_verl_spec

require_verl_or_skip()
from pats.backends.verl import preflight, routes
from pats.backends.verl.config import compose, verl_overrides
from pats.cli.main import main
from pats.errors import PrerequisiteError
from pats.spec import load_spec

REPO = Path(__file__).resolve().parents[1]
SDPA = "++actor_rollout_ref.model.override_config.attn_implementation=sdpa"


def config_for(tmp_path, *overrides: str, engine: str = "vllm"):
    """verl's config for the small twx verl spec, as pats composes it, with `overrides` after it."""
    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"), [f"trainer.rollout_engine={engine}"])
    paths = {name: f"/bundle/{name}" for name in ("train_files", "val_files", "agent_loops", "spec_path")}
    return compose(verl_overrides(spec, **paths, run_dir="/run", model_path="/model") + list(overrides))


@pytest.fixture
def node(monkeypatch):
    """A node with everything (verl 0.9.1, torch 2.11 for CUDA 13 on driver 580, vllm, sglang,
    flash-attn); `node(...)` takes pieces away."""
    state = {"verl": "0.9.1", "cuda": "13.0", "available": True, "driver": "580.65.06", "broken": set()}
    monkeypatch.setattr(preflight, "installed_version", lambda dist: state[dist] if dist == "verl" else None)
    monkeypatch.setattr(
        preflight, "import_error", lambda name: f"ImportError: no {name}" if name in state["broken"] else None
    )
    monkeypatch.setattr(preflight, "torch_cuda", lambda: ("2.11.0", state["cuda"], state["available"]))
    monkeypatch.setattr(preflight, "driver_version", lambda: state["driver"])

    def change(**kwargs):
        state.update(kwargs)

    return change


def refusal(config) -> str:
    with pytest.raises(PrerequisiteError) as err:
        preflight.check_node(config)
    return str(err.value)


def test_a_node_with_everything_passes(tmp_path, node):
    config = config_for(tmp_path)
    assert preflight.needs(config).attn_implementation == "auto"  # pats leaves the choice to the node
    assert "flash_attn imports here" in preflight.resolve_attention(config)
    need = preflight.check_node(config)
    assert (need.engine, need.attn_implementation, need.flash_attn) == ("vllm", "flash_attention_2", True)


def test_a_wrong_or_missing_verl_is_refused_with_the_install(tmp_path, node):
    config = config_for(tmp_path)
    node(verl="0.8.0")
    said = refusal(config)
    assert "verl 0.8.0 is installed" in said and 'pip install "verl[vllm]==0.9.1"' in said
    node(verl=None)
    assert "verl is not installed" in refusal(config)


def test_a_cpu_build_of_torch_is_refused_with_the_cuda_build_to_install(tmp_path, node):
    node(cuda=None, available=False)
    said = refusal(config_for(tmp_path))
    assert "torch 2.11.0 is a CPU build" in said
    assert 'pip uninstall -y torch && pip install "verl[vllm]==0.9.1"' in said
    assert "the install route for driver 580.65.06 is cuda13" in said
    node(driver="570.86.10")
    assert "the install route for driver 570.86.10 is cuda12" in refusal(config_for(tmp_path))


@pytest.mark.parametrize(
    ("driver", "route"),
    [("580.65.06", "cuda13"), ("575.51.03", "cuda12"), ("535.230.02", "cuda12"), ("520.61.05", None)],
)
def test_each_driver_gets_the_newest_route_it_runs(driver, route):
    found = routes.route_for(driver)
    assert (found.name if found else None) == route


def test_a_driver_too_old_for_torchs_cuda_is_refused_with_both_versions(tmp_path, node):
    config = config_for(tmp_path)
    node(available=False, driver="550.54.15")
    said = refusal(config)
    assert "built for CUDA 13.0, which needs an NVIDIA driver >= 580" in said and "550.54.15" in said
    # The fix names the install route the driver runs: R535/R550/R570 get the CUDA 12 one, whole.
    assert "the install route for driver 550.54.15 is cuda12" in said
    assert "vllm==0.19.1 torch==2.10.0" in said and "transformers==5.9.0" in said
    node(driver="470.239.06")
    assert "update the NVIDIA driver" in refusal(config)
    node(driver=None)
    assert "no NVIDIA driver answers here" in refusal(config)
    node(driver="580.65.06")  # a driver new enough, and still no GPU: what to look at
    said = refusal(config)
    assert "sees no GPU" in said and "CUDA_VISIBLE_DEVICES" in said


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_rollout_engine_the_config_names_must_import(tmp_path, node, engine):
    node(broken={engine})
    said = refusal(config_for(tmp_path, engine=engine))
    assert f"rollout engine {engine}" in said and f'pip install "verl[{engine}]==0.9.1"' in said
    other = "sglang" if engine == "vllm" else "vllm"
    node(broken={other})  # the engine the config does not name is not needed
    preflight.check_node(config_for(tmp_path, engine=engine))


def test_without_flash_attn_the_attention_is_sdpa_and_the_preflight_says_how_to_turn_it_on(tmp_path, node):
    node(broken={"flash_attn"})
    config = config_for(tmp_path)
    said = preflight.resolve_attention(config)
    assert said.startswith("attention sdpa: flash_attn does not import here")
    assert preflight.FLASH_ATTN_INSTALL in said and "flash_attention_2" in said
    need = preflight.check_node(config)
    assert (need.attn_implementation, need.flash_attn) == ("sdpa", False)
    assert config.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"


def test_flash_attn_asked_for_by_name_is_required_and_the_fix_names_sdpa(tmp_path, node):
    node(broken={"flash_attn"})
    flash = "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    config = config_for(tmp_path, flash)
    assert preflight.resolve_attention(config) == f"attention flash_attention_2 ({preflight.ATTN_KEY})"
    said = refusal(config)
    assert "attn_implementation=flash_attention_2" in said
    assert preflight.FLASH_ATTN_INSTALL in said and SDPA in said
    need = preflight.check_node(config_for(tmp_path, SDPA))  # the fix it names passes
    assert (need.attn_implementation, need.flash_attn) == ("sdpa", False)


@pytest.mark.parametrize("name", ["alfworld", "webshop", "search_qa"])
def test_the_shipped_verl_specs_launch_without_flash_attn(tmp_path, node, name):
    node(broken={"flash_attn"})
    spec = load_spec(REPO / "experiments" / name / "pats.yaml", ["trainer.rollout_engine=vllm"])
    assert spec.trainer.backend == "verl"
    paths = {name: f"/bundle/{name}" for name in ("train_files", "val_files", "agent_loops", "spec_path")}
    config = compose(verl_overrides(spec, **paths, run_dir="/run", model_path="/model"))
    preflight.resolve_attention(config)
    assert preflight.check_node(config).attn_implementation == "sdpa"


def test_every_missing_piece_is_listed_at_once(tmp_path, node):
    node(verl="0.9.0", cuda=None, available=False, broken={"vllm", "flash_attn"})
    flash = "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    said = refusal(config_for(tmp_path, flash))
    assert said.count("\n  - ") == 4


def test_the_module_command_launch_sh_runs(tmp_path, node, capsys):
    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"), ["trainer.rollout_engine=vllm"])
    paths = {name: f"/bundle/{name}" for name in ("train_files", "val_files", "agent_loops", "spec_path")}
    overrides = verl_overrides(spec, **paths, run_dir="/run", model_path="/model")
    assert preflight.main(overrides) == 0
    assert "preflight: ok" in capsys.readouterr().out
    node(broken={"flash_attn"})
    assert preflight.main(overrides) == 0  # SDPA, and how to turn flash-attn on
    out = capsys.readouterr().out
    assert "attention sdpa" in out and preflight.FLASH_ATTN_INSTALL in out
    flash = "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    assert preflight.main([*overrides, flash]) == PrerequisiteError.exit_code
    assert SDPA in capsys.readouterr().err
    assert preflight.main([*overrides, flash, SDPA]) == 0  # an override after `bash launch.sh` reaches it


def test_the_module_command_reads_every_override_after_its_name(tmp_path, node, monkeypatch, capsys):
    """`python3 -m pats.backends.verl.preflight OVERRIDE...`: the first override counts (here the one
    that asks for flash-attn, missing on this node), and the module's own name is not an override."""
    spec = load_spec(twx_verl_spec(tmp_path / "spec.yaml"), ["trainer.rollout_engine=vllm"])
    paths = {name: f"/bundle/{name}" for name in ("train_files", "val_files", "agent_loops", "spec_path")}
    overrides = verl_overrides(spec, **paths, run_dir="/run", model_path="/model")
    monkeypatch.setattr("sys.argv", ["pats/backends/verl/preflight.py", *overrides])
    assert preflight.main() == 0
    ok = "preflight: ok (verl 0.9.1, vllm; attention flash_attention_2 (flash_attn imports here))\n"
    assert capsys.readouterr().out == ok, "the line read whole"
    node(broken={"flash_attn"})
    flash = "++actor_rollout_ref.model.override_config.attn_implementation=flash_attention_2"
    monkeypatch.setattr("sys.argv", ["pats/backends/verl/preflight.py", flash, *overrides])
    assert preflight.main() == PrerequisiteError.exit_code
    err = capsys.readouterr().err
    assert err.startswith("preflight: this node cannot run the verl config:\n  - the actor loads with "), err
    assert "flash_attn does not import here" in err


def test_pats_run_refuses_this_cpu_machine_before_verl_starts(tmp_path, capsys, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")

    def no_start(*args, **kwargs):
        raise AssertionError("verl's run_ppo started")

    monkeypatch.setattr("verl.trainer.main_ppo.run_ppo", no_start)
    root = tmp_path / "runs"
    spec = twx_verl_spec(tmp_path / "spec" / "spec.yaml", root=root)
    assert main(["run", str(spec)]) == PrerequisiteError.exit_code
    err = capsys.readouterr().err
    assert "this node cannot run the verl config" in err
    # Why, by the torch installed: a CPU build, or a CUDA build (PyPI's default) with no driver.
    assert "is a CPU build" in err or "needs an NVIDIA driver" in err
    assert "trainer.backend: local" in err and "pats export verl" in err
    assert not root.exists() or not any(root.iterdir()), "a refused run leaves nothing"


def test_sdpa_keeps_remove_paddings_packed_sequences_apart():
    """What verl's remove-padding feeds the model (sequences packed into one row, position ids restarting
    at 0, no attention mask, no cache) gives under SDPA the logits of each sequence alone."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, attn_implementation="sdpa",
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    first, second = torch.randint(0, 64, (1, 5)), torch.randint(0, 64, (1, 4))
    packed = torch.cat([first, second], dim=1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 0, 1, 2, 3]])
    with torch.no_grad():
        alone = [model(input_ids=ids, use_cache=False).logits for ids in (first, second)]
        together = model(input_ids=packed, position_ids=positions, use_cache=False).logits
        unmarked = model(input_ids=packed, use_cache=False).logits  # no position ids: one long sequence
    assert model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(together[:, :5], alone[0])
    torch.testing.assert_close(together[:, 5:], alone[1])
    assert not torch.allclose(unmarked[:, 5:], alone[1], atol=1e-3)  # the test can tell them apart


def test_what_every_node_needs_and_what_the_launching_node_decides_read_whole():
    """`Needs.lines` (the README's "On every node" and `pats export`'s "every node needs") and
    `Needs.notes` (the attention left to the launching node, apart from what every node needs: issue 59,
    item 19), whole, for each engine and attention."""
    flash = "pip install flash-attn==2.8.3 --no-build-isolation"
    verl = (
        "verl 0.9.1 with {0}, the rollout engine, and the CUDA build of torch it pins "
        '(`pip install "verl[{0}]==0.9.1"`), which the node\'s NVIDIA driver must run'
    )
    vllm = verl.format("vllm") + (
        f" (CUDA 13, a driver >= 580; with a driver 525-579 the cuda12 route: `{routes.ROUTES['cuda12'].command}`)"
    )
    auto = preflight.Needs("vllm", "auto")
    assert auto.lines() == [vllm]
    assert auto.notes() == [
        "the attention is picked where the run launches: flash_attention_2 if flash_attn imports there, else "
        f"PyTorch's SDPA (nothing to install); {preflight.FLASH_ATTN_ON}"
    ]
    required = preflight.Needs("sglang", "flash_attention_2")
    assert required.lines() == [
        verl.format("sglang"),
        f"flash-attn: the actor loads with attn_implementation=flash_attention_2 (`{flash}`, a CUDA build), or "
        f"add `{SDPA}` to trainer.overrides (PyTorch's SDPA attention, nothing to install)",
    ]
    assert required.notes() == [] == preflight.Needs("vllm", "sdpa").notes()
    assert preflight.Needs("vllm", "sdpa").lines() == [vllm]
