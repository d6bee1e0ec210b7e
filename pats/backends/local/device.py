"""Which device the local backend trains on (`trainer.device`), decided before anything loads.

`cuda` asks for a GPU and stops the run at once where torch sees none (a CPU-only torch build, no
driver, `CUDA_VISIBLE_DEVICES` empty), before a model, an environment or a run directory exists;
`auto` takes the GPU where there is one, else the CPU; `cpu` never uses a GPU.
"""

from __future__ import annotations

import torch

from pats.errors import PrerequisiteError
from pats.spec.models import LocalTrainerSpec


def require_device(trainer: LocalTrainerSpec) -> torch.device:
    """The torch device `trainer.device` names on this machine, or a PrerequisiteError saying what to
    write instead."""
    if trainer.device == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise PrerequisiteError(
            f"trainer.device is cuda but torch sees no CUDA GPU on this machine (torch {torch.__version__}, "
            f"{build}); write trainer.device: auto (the GPU where there is one, else the CPU) or "
            "trainer.device: cpu, e.g. `pats run SPEC trainer.device=auto`"
        )
    want_cuda = trainer.device == "cuda" or (trainer.device == "auto" and torch.cuda.is_available())
    return torch.device("cuda" if want_cuda else "cpu")
