"""A run records the machine it trains on (issue 58, item 6): each start adds its CPU model and torch
version to host.json, a resume after it (pats.host)."""

from __future__ import annotations

import platform

import pytest

from pats.engine.run import resume, run_spec
from pats.errors import PrerequisiteError, RunInterrupted
from pats.host import (
    HOST_FILE,
    Machine,
    cpu_has_native_bf16,
    cpu_model,
    read_hosts,
    this_machine,
    torch_version,
)
from pats.spec import load_spec
from pats.testing.sweep import scripted_trainers

CPUINFO = """\
processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13  64-Core Processor
flags\t\t: fpu vme

processor\t: 1
model name\t: AMD EPYC 7B13  64-Core Processor
"""


def test_the_cpu_model_is_cpuinfos_model_name_else_platforms(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    assert cpu_model(info) == "AMD EPYC 7B13 64-Core Processor"
    info.write_text("processor\t: 0\nCPU implementer\t: 0x41\n")  # an ARM machine's: no model name
    assert cpu_model(info) == (platform.processor() or platform.machine() or "unknown")
    assert cpu_model(tmp_path / "none") == (platform.processor() or platform.machine() or "unknown")


@pytest.mark.parametrize(
    ("flags", "native"),
    [
        ("fpu avx avx2 fma", False),  # the AVX2-only EPYC (Zen 3)
        ("fpu avx2 avx512f avx512_bf16", True),  # the EPYC with avx512_bf16 (Zen 4)
        ("fpu avx2 amx_bf16 amx_tile", True),  # an Intel with AMX
        ("fpu avx512_bf16x", False),  # a flag is a whole word
    ],
)
def test_native_bf16_is_read_from_the_cpus_flags(tmp_path, flags, native):
    info = tmp_path / "cpuinfo"
    info.write_text(f"processor\t: 0\nflags\t\t: {flags}\n\nprocessor\t: 1\nflags\t\t: {flags}\n")
    assert cpu_has_native_bf16(info) is native
    assert cpu_has_native_bf16(tmp_path / "none") is False, "not Linux: fp32"


def test_the_torch_version_is_the_installed_ones():
    import torch

    # PyPI's CUDA wheel is versioned 2.13.0 in its metadata while torch says 2.13.0+cu130; the CPU
    # wheel (download.pytorch.org, this project's install) says 2.13.0+cpu in both.
    assert torch_version() in (torch.__version__, torch.__version__.split("+")[0])


def test_each_start_of_a_run_records_its_machine(repo, tmp_path):
    """A run that stops after step 0 and is resumed has two starts, of steps 0 and 1, each with this
    machine; compare reads them as one machine."""
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["name=hosted", "trainer.steps=2", "trainer.checkpoint_every=1", "eval.at_start=false",
         "eval.every=10", "eval.gap_tasks=0", "logging.wandb=disabled", "logging.progress=false",
         f"logging.root={tmp_path}"],
    )  # fmt: skip
    with pytest.raises(RunInterrupted):
        run_spec(spec, scripted_trainers(stops="hosted"))
    run_dir = tmp_path / "hosted"
    hosts = read_hosts(run_dir)
    assert hosts is not None and [s.step for s in hosts.starts] == [0]
    resume(run_dir, scripted_trainers())
    hosts = read_hosts(run_dir)
    assert hosts is not None and [s.step for s in hosts.starts] == [0, 1]
    assert hosts.machines() == (this_machine(),)
    assert this_machine() == Machine(cpu=cpu_model(), torch=torch_version())
    assert hosts.starts[1].started >= hosts.starts[0].started


def test_a_run_without_a_record_reads_as_none_and_a_broken_one_is_refused(tmp_path):
    assert read_hosts(tmp_path) is None
    (tmp_path / HOST_FILE).write_text('{"starts": [{"cpu": "x"}]}')
    with pytest.raises(PrerequisiteError, match="is not a host record this version of pats can read"):
        read_hosts(tmp_path)


def test_a_verl_run_records_the_launching_machine_before_verl_starts(tmp_path, monkeypatch):
    """Under verl the record is the launching machine's, its first step verl's to find (None)."""
    from pats.backends.verl import launch
    from pats.engine.run import TRAINERS

    seen = []
    monkeypatch.setattr(launch, "run_verl", lambda spec, run_dir: seen.append(read_hosts(run_dir)) or run_dir)
    assert TRAINERS["verl"](None, tmp_path, None) == tmp_path  # the spec is only passed on
    (hosts,) = seen
    assert hosts is not None and [(s.machine, s.step) for s in hosts.starts] == [(this_machine(), None)]
