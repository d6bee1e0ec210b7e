"""What a composed verl config needs on the node that launches it, checked before verl starts.

Missing, each of these stops verl late and far from its cause (inside a Ray worker, after the model
is fetched), so `pats run` checks them first and launch.sh runs `python3 -m pats.backends.verl.preflight`
with its overrides before `python3 -m pats.backends.verl.main` (which checks every node of the Ray
cluster again, pats.backends.verl.cluster):
  - verl itself at the version pats composes its config for (`VERL_VERSION`);
  - a CUDA build of torch that this node's NVIDIA driver runs;
  - the rollout engine the config names (`actor_rollout_ref.rollout.name`), importable;
  - flash-attn, when the config asks for a FlashAttention implementation. verl 0.9.1's default is
    flash_attention_2 (`HFModelConfig` reads `ATTN_KEY`), and flash-attn has no wheel for the torch 2.11
    + CUDA 13 that `verl[vllm]==0.9.1` installs (PyPI has only its source: CUDA_HOME and about an hour
    of nvcc). Departure from verl: where `ATTN_KEY` is unset, pats picks the attention on the node that
    launches (`resolve_attention`): flash_attention_2 when flash_attn imports there, else PyTorch's
    SDPA (`SDPA_OVERRIDE`), which needs nothing more, and says how to turn flash-attn on. Remove-padding (`use_remove_padding`, on by default) does not
    need flash-attn: verl falls back to pure-torch padding helpers (verl.utils.attention_utils), and
    under SDPA transformers keeps the packed sequences apart from their position ids
    (tests/test_verl_preflight.py checks that on a tiny model).
Every refusal is one PrerequisiteError listing each missing piece with its fix. `pats export verl`,
usually run on a machine that is not a GPU node, refuses only a wrong verl version (its config check
is verl's) and lists the rest (`needs`) in the bundle's README.

`PATS_SKIP_PREFLIGHT` (`skipped`, its one reader): `head` (or `1`) skips the launching node's own check
(`pats run`'s, and this module's, which launch.sh always runs: a head node without GPUs) and keeps the
check of every node of the cluster; `all` skips both; another value is refused on either path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass

from pats.backends.verl.config import compose, import_error
from pats.backends.verl.routes import (
    MIN_DRIVER,
    ROUTES,
    VERL_VERSION,
    installed_version,
    route_advice,
)
from pats.errors import PatsError, PrerequisiteError

ATTN_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
VERL_DEFAULT_ATTN = "flash_attention_2"  # verl.workers.config.model.HFModelConfig, when ATTN_KEY is unset
SDPA_OVERRIDE = f"++{ATTN_KEY}=sdpa"  # ++: sets it whether or not a key is there
AUTO_ATTN = "auto"  # ATTN_KEY unset: resolve_attention picks flash_attention_2 or sdpa on the launching node
# verl 0.9.1's own flash-attn extra (flash-attn-cu130torch211) pins 2.8.3. PyPI has it only as source: it
# compiles against the node's torch with the CUDA toolkit (nvcc), or its setup fetches a prebuilt wheel
# from the project's GitHub releases when one matches torch, CUDA and Python. Not built by pats' tests.
FLASH_ATTN_INSTALL = "pip install flash-attn==2.8.3 --no-build-isolation"
FLASH_ATTN_ON = (
    f"to use FlashAttention-2, install flash-attn where a wheel matches this node's torch and CUDA "
    f"(`{FLASH_ATTN_INSTALL}` fetches one from github.com/Dao-AILab/flash-attention/releases if it "
    "exists, else compiles for about an hour with CUDA_HOME set); pats then picks it, or add "
    f"`++{ATTN_KEY}=flash_attention_2` to trainer.overrides to require it"
)
SKIP_VARIABLE = "PATS_SKIP_PREFLIGHT"
# Its values, and the checks each skips: "head", launch.sh's check of the node it runs on; "nodes", the
# check of every node of the Ray cluster (pats.backends.verl.main). The docs once gave 1 for a head node
# without GPUs, so 1 is `head`: the GPU nodes are never left unchecked by accident.
SKIPS: dict[str, frozenset[str]] = {
    "": frozenset(),
    "0": frozenset(),
    "head": frozenset({"head"}),
    "1": frozenset({"head"}),
    "all": frozenset({"head", "nodes"}),
}


def skipped(environ: Mapping[str, str]) -> frozenset[str]:
    """The preflights `PATS_SKIP_PREFLIGHT` in `environ` skips (see `SKIPS`): the one reader of the
    variable, for `pats run`, launch.sh's check of its node (`main`) and the check of every node
    (pats.backends.verl.main)."""
    value = environ.get(SKIP_VARIABLE, "")
    if value not in SKIPS:
        raise PrerequisiteError(
            f"{SKIP_VARIABLE}={value!r} is not a value pats reads; the values it reads: head (skip the "
            "launching node's own check, e.g. a head node without GPUs; every node of the Ray cluster is "
            "still checked), all (no check at all), 1 (the same as head), 0 or unset (every check)"
        )
    return SKIPS[value]


def skip_line(environ: Mapping[str, str]) -> str:
    """What the launching node's check prints when `PATS_SKIP_PREFLIGHT` skips it."""
    return f"preflight: this node is not checked ({SKIP_VARIABLE}={environ[SKIP_VARIABLE]})"


def engine_install(engine: str) -> str:
    return f'pip install "verl[{engine}]=={VERL_VERSION}"'


@dataclass(frozen=True)
class Needs:
    """What a composed verl config needs on the node that runs it."""

    engine: str  # actor_rollout_ref.rollout.name
    attn_implementation: str  # what the actor and reference models load with

    @property
    def flash_attn(self) -> bool:
        """flash-attn is required (the config names a FlashAttention implementation)."""
        return self.attn_implementation.startswith("flash_attention")

    def lines(self) -> list[str]:
        """What every node needs, one line each with its install command (the bundle's README, what
        `pats export verl` prints after "every node needs")."""
        out = [
            f"verl {VERL_VERSION} with {self.engine}, the rollout engine, and the CUDA build of torch it pins "
            f"(`{engine_install(self.engine)}`), which the node's NVIDIA driver must run"
            + (
                f" (CUDA 13, a driver >= 580; with a driver 525-579 the cuda12 route: `{ROUTES['cuda12'].command}`)"
                if self.engine == "vllm"
                else ""
            )
        ]
        if self.flash_attn:
            out.append(
                f"flash-attn: the actor loads with attn_implementation={self.attn_implementation} "
                f"(`{FLASH_ATTN_INSTALL}`, a CUDA build), or add `{SDPA_OVERRIDE}` to trainer.overrides "
                "(PyTorch's SDPA attention, nothing to install)"
            )
        return out

    def notes(self) -> list[str]:
        """What is decided where the run launches rather than needed on every node, one sentence each."""
        if self.attn_implementation != AUTO_ATTN:
            return []
        return [
            "the attention is picked where the run launches: flash_attention_2 if flash_attn imports "
            f"there, else PyTorch's SDPA (nothing to install); {FLASH_ATTN_ON}"
        ]


def needs(config) -> Needs:
    from omegaconf import OmegaConf

    attn = OmegaConf.select(config, ATTN_KEY, default=None) or AUTO_ATTN
    return Needs(engine=str(config.actor_rollout_ref.rollout.name), attn_implementation=str(attn))


def resolve_attention(config) -> str:
    """Set `ATTN_KEY` in `config` where it is unset (verl would load flash_attention_2): flash_attention_2
    when flash_attn imports here, else sdpa. Returns a line saying what was chosen and why."""
    from omegaconf import OmegaConf, open_dict

    chosen = OmegaConf.select(config, ATTN_KEY, default=None)
    if chosen:
        return f"attention {chosen} ({ATTN_KEY})"
    why = import_error("flash_attn")
    chosen = "flash_attention_2" if why is None else "sdpa"
    with open_dict(config):
        OmegaConf.update(config, ATTN_KEY, chosen, force_add=True)
    if why is None:
        return "attention flash_attention_2 (flash_attn imports here)"
    return f"attention sdpa: flash_attn does not import here ({why}); {FLASH_ATTN_ON}"


# -- probes: tests replace these and import_error (from config) ---------------------------------------


def torch_cuda() -> tuple[str, str | None, bool]:
    """(torch's version, the CUDA version it was built for or None, whether it can use a GPU here)."""
    import torch

    return torch.__version__, torch.version.cuda, torch.cuda.is_available()


@dataclass(frozen=True)
class Gpu:
    """One GPU as nvidia-smi lists it."""

    name: str
    memory_mib: int  # memory.total
    driver: str

    @property
    def memory_gb(self) -> float:
        """Its memory in the plan's unit, 10^9 bytes (an "80 GB" H100 lists 81,559 MiB: 85.5 GB)."""
        return self.memory_mib * 2**20 / 1e9


def nvidia_gpus() -> list[Gpu]:
    """The GPUs nvidia-smi lists, or none where it is missing or fails."""
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    gpus = []
    for line in out.splitlines():
        parts = [part.strip() for part in line.rsplit(",", 2)]
        if len(parts) == 3 and parts[1].isdigit():
            gpus.append(Gpu(parts[0], int(parts[1]), parts[2]))
    return gpus


def driver_version() -> str | None:
    """The NVIDIA driver's version from nvidia-smi, or None where there is none."""
    gpus = nvidia_gpus()
    return gpus[0].driver if gpus else None


# -- checks ---------------------------------------------------------------------------------------


def verl_version_problem(engine: str = "vllm") -> str | None:
    found = installed_version("verl")
    if found == VERL_VERSION:
        return None
    have = f"verl {found} is installed" if found else "verl is not installed"
    return f"{have}; pats composes its config for verl {VERL_VERSION}: `{engine_install(engine)}`"


def torch_problem(engine: str = "vllm") -> str | None:
    torch_version, cuda, available = torch_cuda()
    if available:
        return None
    if cuda is None:
        driver = driver_version()
        where = route_advice(driver) if driver is not None else "nvidia-smi finds no driver here"
        return (
            f"torch {torch_version} is a CPU build and verl trains on NVIDIA GPUs: install the CUDA build "
            f"that verl's rollout engine pins (`pip uninstall -y torch && {engine_install(engine)}`: torch "
            f"2.11.0 for CUDA 13 from PyPI, on Linux; a driver older than 580 needs the cuda12 route); {where}"
        )
    major = int(cuda.split(".")[0])
    need = MIN_DRIVER.get(major)
    driver = driver_version()
    if driver is None:
        found = "no NVIDIA driver answers here (nvidia-smi is missing or fails)"
    else:
        found = f"the driver is {driver} (nvidia-smi)"
    if need is not None and (driver is None or int(driver.split(".")[0]) < need):
        return (
            f"torch {torch_version} is built for CUDA {cuda}, which needs an NVIDIA driver >= {need}, and "
            f"{found}: update the driver, or install the route of an older CUDA, torch and vLLM together "
            f"(a torch alone would not match vLLM's build); {route_advice(driver)}"
        )
    return (
        f"torch {torch_version} (CUDA {cuda}) sees no GPU and {found}: check CUDA_VISIBLE_DEVICES and "
        "that this node has a GPU; verl trains on NVIDIA GPUs"
    )


def engine_problem(engine: str) -> str | None:
    why = import_error(engine)
    if why is None:
        return None
    return (
        f"the rollout engine {engine} (trainer.rollout_engine) does not import here ({why}): "
        f"`{engine_install(engine)}`"
    )


def flash_attn_problem(need: Needs) -> str | None:
    if not need.flash_attn:
        return None
    why = import_error("flash_attn")
    if why is None:
        return None
    return (
        f"the actor loads with attn_implementation={need.attn_implementation} ({ATTN_KEY}) "
        f"and flash_attn does not import here ({why}): install it (`{FLASH_ATTN_INSTALL}`: it compiles "
        f"against this node's torch and CUDA toolkit), or use PyTorch's SDPA attention, which needs "
        f"nothing more: add `{SDPA_OVERRIDE}` to the spec's trainer.overrides (or after `bash launch.sh`)"
    )


def check_node(config) -> Needs:
    """Refuse, with every missing piece and its fix, a node that cannot run `config`."""
    need = needs(config)
    problems = [
        verl_version_problem(need.engine),
        torch_problem(need.engine),
        engine_problem(need.engine),
        flash_attn_problem(need),
    ]
    found = [p for p in problems if p is not None]
    if found:
        raise PrerequisiteError(
            "this node cannot run the verl config:\n" + "\n".join(f"  - {p}" for p in found)
        )
    return need


def main(argv: list[str] | None = None) -> int:
    """`python3 -m pats.backends.verl.preflight OVERRIDE...`: compose as main_ppo would, pick the
    attention as the launch will (`resolve_attention`), then check; unless `PATS_SKIP_PREFLIGHT` skips
    this node's check (launch.sh always runs this: the variable has one reader, `skipped`)."""
    overrides = sys.argv[1:] if argv is None else argv
    try:
        if "head" in skipped(os.environ):
            print(skip_line(os.environ))
            return 0
        config = compose(overrides)
        attention = resolve_attention(config)
        need = check_node(config)
    except PatsError as err:
        print(f"preflight: {err}", file=sys.stderr)
        return err.exit_code
    print(f"preflight: ok (verl {VERL_VERSION}, {need.engine}; {attention})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
