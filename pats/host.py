"""Where a run trained: its run directory's `host.json`, one line per start of the run.

Each start (`pats run`, `pats run --resume`, a sweep's cell, fresh or resumed) adds the machine it
trains on: its CPU model and its torch version, which sampling numerics depend on, so two runs of one
seed on different machines can part from their first evaluation. `pats compare` reads them to say when a
seed's cells ran on different hardware (pats.compare.notes.host_notes). Runs written before pats kept
this file have none: their hardware is not recorded, and nothing here guesses it. Under verl the record
is the launching machine's; the GPUs' nodes are verl's to log.
"""

from __future__ import annotations

import os
import platform
import socket
import time
from importlib import metadata
from pathlib import Path

from pydantic import ValidationError

from pats.errors import PrerequisiteError
from pats.fileio import write_atomic
from pats.types import Record

HOST_FILE = "host.json"
CPUINFO = Path("/proc/cpuinfo")


class Machine(Record):
    """What a run's numerics depend on besides its spec: the CPU model and the torch version."""

    cpu: str  # /proc/cpuinfo's "model name", else platform.processor(), else platform.machine()
    torch: str  # the installed torch's version ("" when none is installed)

    def text(self) -> str:
        return f"{self.cpu}, torch {self.torch or 'not installed'}"


class HostStart(Record):
    """One start of a run: the machine, where and when, and the first step it trained."""

    machine: Machine
    hostname: str
    cpus: int  # os.cpu_count()
    started: float  # Unix time
    step: int | None  # the first step this start trains (None: the trainer decides, as verl's resume does)


class Hosts(Record):
    """A run directory's host.json."""

    starts: tuple[HostStart, ...]

    def machines(self) -> tuple[Machine, ...]:
        """The distinct machines the run trained on, in the order it first did."""
        return tuple(dict.fromkeys(s.machine for s in self.starts))


def machine_cpus() -> int:
    """The CPUs this process may run on (a container's share, not the host's count): what a sweep's
    parallel cells divide and what decides whether vLLM keeps a core for its scheduler."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _cpuinfo_field(cpuinfo: Path, key: str) -> str | None:
    """The first non-empty value of `key` in /proc/cpuinfo (the first processor's); None without one
    or without the file (not Linux)."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key and value.strip():
            return value.strip()
    return None


def cpu_model(cpuinfo: Path = CPUINFO) -> str:
    """The CPU's model name from /proc/cpuinfo (Linux on x86), else what `platform` says."""
    name = _cpuinfo_field(cpuinfo, "model name")
    return " ".join(name.split()) if name else platform.processor() or platform.machine() or "unknown"


def cpu_has_native_bf16(cpuinfo: Path = CPUINFO) -> bool:
    """Whether the CPU computes in bf16 natively (avx512_bf16 or AMX). Without it bf16 matmuls are
    emulated (about 1 GFLOP/s against about 120 in fp32 on the 2-core AVX2 EPYC, 2026-12-07), so the
    policy's autocast and the test servers stay in fp32. Not Linux: unknown, so False (fp32)."""
    flags = set((_cpuinfo_field(cpuinfo, "flags") or "").split())
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def torch_version() -> str:
    """The installed torch's version, read from its package metadata (without importing torch)."""
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return ""


def this_machine() -> Machine:
    return Machine(cpu=cpu_model(), torch=torch_version())


def read_hosts(run_dir: Path) -> Hosts | None:
    """The run's host.json; None for a run written before pats kept it."""
    path = run_dir / HOST_FILE
    if not path.is_file():
        return None
    try:
        return Hosts.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as err:
        raise PrerequisiteError(
            f"{path} is not a host record this version of pats can read ({err.errors()[0]['msg']}); "
            "move it aside (the run then reads as one whose host was not recorded)"
        ) from None


def record_start(run_dir: Path, step: int | None) -> Hosts:
    """Add this machine, as the start of `step`, to the run's host.json."""
    before = read_hosts(run_dir)
    start = HostStart(
        machine=this_machine(),
        hostname=socket.gethostname(),
        cpus=os.cpu_count() or 0,
        started=time.time(),
        step=step,
    )
    hosts = Hosts(starts=(*(before.starts if before else ()), start))
    write_atomic(run_dir / HOST_FILE, hosts.model_dump_json(indent=1))
    return hosts
