"""What a composed verl config needs on the node that launches it, checked before verl starts.

Missing, each of these stops verl late and far from its cause (inside a Ray worker, after the model
is fetched), so `pats run` checks them first and launch.sh runs `python3 -m pats.backends.verl.preflight`
with its overrides before `main_ppo`:
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
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from pats.backends.verl.config import compose, import_error
from pats.errors import PatsError, PrerequisiteError

VERL_VERSION = "0.9.1"
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
# The oldest Linux driver each CUDA major version of torch runs on (NVIDIA's minor-version compatibility).
MIN_DRIVER = {11: 450, 12: 525, 13: 580}
# The two install routes docs/verl.md gives (scripts/verl-install-dry-run ROUTE resolves each), by the
# CUDA major version their torch is built for. cuda13: verl's own vllm extra (vLLM 0.24, torch 2.11 for
# CUDA 13 from PyPI). cuda12: the newest vLLM whose torch has a CUDA 12 build on PyPI and that accepts
# verl 0.9.1's transformers (>=5.5.3,<5.11): vLLM 0.19.1 with torch 2.10.0 (CUDA 12.8); verl 0.9.1's
# vLLM server keeps code paths for vLLM < 0.20 and < 0.22. Neither route has run on a GPU here.
ROUTES = {
    13: ("cuda13", f'pip install "verl[vllm]=={VERL_VERSION}"'),
    12: (
        "cuda12",
        f'pip install "verl[verl-core]=={VERL_VERSION}" vllm==0.19.1 torch==2.10.0 torchvision==0.25.0 '
        "torchaudio==2.10.0 transformers==5.9.0",
    ),
}


def route_for(driver: str | None) -> tuple[str, str] | None:
    """(name, install command) of the newest route the driver runs, or None (no driver, or too old)."""
    if driver is None:
        return None
    major = int(driver.split(".")[0])
    fits = [cuda for cuda in sorted(ROUTES, reverse=True) if major >= MIN_DRIVER[cuda]]
    return ROUTES[fits[0]] if fits else None


def route_advice(driver: str | None) -> str:
    route = route_for(driver)
    if route is None:
        return (
            "no install route pats gives runs on this driver (CUDA 12 needs >= 525, CUDA 13 >= 580): "
            "update the NVIDIA driver"
        )
    name, command = route
    return f"the install route for driver {driver} is {name} (docs/verl.md, Install): `{command}`"


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
        """One line per need, with its install command, for the bundle's README."""
        out = [
            f"verl {VERL_VERSION} with {self.engine}, the rollout engine, and the CUDA build of torch it pins "
            f"(`{engine_install(self.engine)}`), which the node's NVIDIA driver must run"
            + (
                f" (CUDA 13, a driver >= 580; with a driver 525-579 the cuda12 route: `{ROUTES[12][1]}`)"
                if self.engine == "vllm"
                else ""
            )
        ]
        if self.attn_implementation == AUTO_ATTN:
            out.append(
                "the attention is picked where the run launches: flash_attention_2 if flash_attn imports "
                f"there, else PyTorch's SDPA (nothing to install); {FLASH_ATTN_ON}"
            )
        if self.flash_attn:
            out.append(
                f"flash-attn: the actor loads with attn_implementation={self.attn_implementation} "
                f"(`{FLASH_ATTN_INSTALL}`, a CUDA build), or add `{SDPA_OVERRIDE}` to trainer.overrides "
                "(PyTorch's SDPA attention, nothing to install)"
            )
        return out


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


def installed_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def torch_cuda() -> tuple[str, str | None, bool]:
    """(torch's version, the CUDA version it was built for or None, whether it can use a GPU here)."""
    import torch

    return torch.__version__, torch.version.cuda, torch.cuda.is_available()


def driver_version() -> str | None:
    """The NVIDIA driver's version from nvidia-smi, or None where there is none."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
    except (OSError, subprocess.SubprocessError):
        return None
    return out[0] if out else None


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
    attention as the launch will (`resolve_attention`), then check."""
    overrides = sys.argv[1:] if argv is None else argv
    try:
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
