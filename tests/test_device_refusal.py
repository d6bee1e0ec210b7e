"""`trainer.device: cuda` on a machine whose torch sees no CUDA GPU stops `pats run` before anything
loads (no model, no environment, no run directory), with what to write instead."""

from __future__ import annotations

import pytest
import torch

import pats.backends.local.policy as policy_module
from pats.cli.main import main
from pats.errors import PrerequisiteError

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")


def test_cuda_on_a_machine_without_one_is_refused_before_anything_loads(repo, tmp_path, capsys, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("the policy was loaded before the device was checked")

    monkeypatch.setattr(policy_module.LocalPolicy, "__init__", no_loading)
    code = main(["run", str(repo / "experiments/quickstart.yaml"), "trainer.device=cuda",
                 f"logging.root={tmp_path}", "logging.wandb=disabled"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == PrerequisiteError.exit_code
    assert "trainer.device is cuda but torch sees no CUDA GPU" in err
    assert "write trainer.device: auto" in err and "trainer.device=auto" in err
    assert "Traceback" not in err and not any(tmp_path.iterdir()), "nothing was written"


def test_auto_and_cpu_take_the_cpu_here():
    from pats.backends.local.device import require_device
    from pats.spec.models import LocalTrainerSpec

    assert require_device(LocalTrainerSpec(device="auto")).type == "cpu"
    assert require_device(LocalTrainerSpec(device="cpu")).type == "cpu"
    with pytest.raises(PrerequisiteError, match="trainer.device: cpu"):
        require_device(LocalTrainerSpec(device="cuda"))
