"""The two ways to install verl 0.9.1 on a GPU node, by the CUDA version the NVIDIA driver runs.

docs/verl.md (Install) gives them; `scripts/verl-install-dry-run ROUTE` resolves each with pip's dry
run; the preflight names the one that fits the driver it finds; `scripts/verl-smoke` picks one from the
driver (or `--route`) and checks the node's packages against its pins.
  cuda13  verl's own vllm extra: vLLM 0.24.0, torch 2.11.0 built for CUDA 13 on PyPI (driver >= 580).
  cuda12  the newest vLLM whose torch has a CUDA 12 build on PyPI and that accepts verl 0.9.1's
          transformers (>=5.5.3,<5.11): vLLM 0.19.1 with torch 2.10.0 for CUDA 12.8 (driver >= 525:
          R535, R550, R570). verl 0.9.1's vLLM server keeps code paths for vLLM < 0.20 and < 0.22, but
          no run of verl on vLLM 0.19.1 has been made.
The pins are what pip's resolver chose on 2026-12-04 (Python 3.11, x86_64 Linux). Neither route has
been installed or run on a GPU by pats.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

VERL_VERSION = "0.9.1"
# The oldest Linux driver each CUDA major version of torch runs on (NVIDIA's minor-version compatibility).
MIN_DRIVER = {11: 450, 12: 525, 13: 580}


@dataclass(frozen=True)
class Route:
    """One install route: the packages `pip install` gets beside pats' clone, and what they resolve to."""

    name: str
    cuda: int  # the CUDA major version its torch is built for
    packages: tuple[str, ...]
    pins: tuple[tuple[str, str], ...]  # (distribution, version) pip's dry run resolved

    @property
    def command(self) -> str:
        """The route's packages as one `pip install` line (pats itself is installed from a clone)."""
        return "pip install " + " ".join(f'"{p}"' if "[" in p else p for p in self.packages)

    def with_pats(self, clone: str) -> str:
        """The whole install line for a node: pats from the clone at `clone` with its verl extra."""
        return f'pip install -e "{clone}[verl]" ' + self.command.removeprefix("pip install ")

    @property
    def min_driver(self) -> int:
        return MIN_DRIVER[self.cuda]


ROUTES = {
    "cuda13": Route(
        "cuda13",
        13,
        (f"verl[vllm]=={VERL_VERSION}",),
        (("verl", VERL_VERSION), ("vllm", "0.24.0"), ("torch", "2.11.0"), ("transformers", "5.9.0")),
    ),
    "cuda12": Route(
        "cuda12",
        12,
        (
            f"verl[verl-core]=={VERL_VERSION}",
            "vllm==0.19.1",
            "torch==2.10.0",
            "torchvision==0.25.0",
            "torchaudio==2.10.0",
            "transformers==5.9.0",
        ),
        (("verl", VERL_VERSION), ("vllm", "0.19.1"), ("torch", "2.10.0"), ("transformers", "5.9.0")),
    ),
}


def route_for(driver: str | None) -> Route | None:
    """The newest route the driver runs, or None (no driver, or one too old for CUDA 12)."""
    if driver is None:
        return None
    major = int(driver.split(".")[0])
    fits = [r for r in sorted(ROUTES.values(), key=lambda r: -r.cuda) if major >= r.min_driver]
    return fits[0] if fits else None


def route_advice(driver: str | None) -> str:
    route = route_for(driver)
    if route is None:
        return (
            "no install route pats gives runs on this driver (CUDA 12 needs >= 525, CUDA 13 >= 580): "
            "update the NVIDIA driver"
        )
    return f"the install route for driver {driver} is {route.name} (docs/verl.md, Install): `{route.command}`"


def installed_version(dist: str) -> str | None:
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def route_problems(route: Route, torch_cuda: str | None) -> list[str]:
    """What this environment's packages lack for `route`: each pinned distribution at its version (the
    local part, `+cu130`, ignored) and torch built for the route's CUDA (`torch_cuda`: torch.version.cuda)."""
    problems = []
    for dist, pinned in route.pins:
        found = installed_version(dist)
        if found is None:
            problems.append(f"{dist} is not installed ({route.name} pins {pinned})")
        elif found.split("+")[0] != pinned:
            problems.append(f"{dist} {found} is installed ({route.name} pins {pinned})")
    if torch_cuda is None:
        problems.append(f"torch is a CPU build ({route.name}: torch built for CUDA {route.cuda})")
    elif int(torch_cuda.split(".")[0]) != route.cuda:
        problems.append(f"torch is built for CUDA {torch_cuda} ({route.name}: CUDA {route.cuda})")
    return problems
