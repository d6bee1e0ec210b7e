"""`pats compare` says where the cells trained (issue 58, item 6): a seed whose cells ran on different
hardware is named with each cell's machine, cells without a host record are said to have none (a host
name alone does not say which machine), and the committed Stage 1 cells, which predate the record, are
never guessed to share one."""

from __future__ import annotations

from pathlib import Path

from test_compare import craft

from pats.compare import compare, read_run, run_dirs
from pats.compare.hosts import host_notes
from pats.host import HOST_FILE, Hosts, HostStart, Machine
from pats.sweep.record import CellStatus, write_status

INTEL = Machine(cpu="Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", torch="2.5.1")
EPYC = Machine(cpu="AMD EPYC 7B13 64-Core Processor", torch="2.5.1")


def hosted(run_dir: Path, *starts: tuple[Machine, int | None]) -> Path:
    """`run_dir` with a host.json of these (machine, first step) starts."""
    hosts = Hosts(
        starts=tuple(HostStart(machine=m, hostname="vm", cpus=2, started=0.0, step=s) for m, s in starts)
    )
    (run_dir / HOST_FILE).write_text(hosts.model_dump_json())
    return run_dir


def notes_of(root: Path) -> list[str]:
    return host_notes({"all": [read_run(d) for d in run_dirs([root])]})


def test_a_seed_whose_cells_ran_on_different_machines_is_named_with_each_cells(tmp_path, repo):
    for seed in (0, 1):
        hosted(craft(tmp_path, repo, f"none-s{seed}", seed, "none", {"g0": [0.0]}), (INTEL, 0))
    hosted(craft(tmp_path, repo, "pats-s0", 0, "pats", {"g0": [0.0]}), (INTEL, 0))
    hosted(craft(tmp_path, repo, "pats-s1", 1, "pats", {"g0": [0.0]}), (INTEL, 0), (EPYC, 7))
    result = compare([read_run(d) for d in run_dirs([tmp_path])], ["none"])
    assert (
        "seed 1: its cells ran on different hardware: none-s1 on Intel(R) Xeon(R) Platinum 8481C CPU @ "
        "2.70GHz, torch 2.5.1; pats-s1 on Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, torch 2.5.1 "
        "(from step 0), then AMD EPYC 7B13 64-Core Processor, torch 2.5.1 (from step 7). Sampling "
        "numerics can differ between machines, so the seed's conditions did not play exactly alike."
    ) in result.notes
    assert not [n for n in result.notes if n.startswith("seed 0")]  # one machine in seed 0: nothing said


def test_another_torch_is_other_hardware_and_one_machine_throughout_is_said_once(tmp_path, repo):
    newer = Machine(cpu=INTEL.cpu, torch="2.6.0")
    hosted(craft(tmp_path / "a", repo, "none-s0", 0, "none", {"g0": [0.0]}), (INTEL, 0))
    hosted(craft(tmp_path / "a", repo, "pats-s0", 0, "pats", {"g0": [0.0]}), (newer, 0))
    assert [n[:45] for n in notes_of(tmp_path / "a")] == ["seed 0: its cells ran on different hardware: "]
    hosted(craft(tmp_path / "b", repo, "none-s0", 0, "none", {"g0": [0.0]}), (INTEL, 0))
    hosted(craft(tmp_path / "b", repo, "pats-s0", 0, "pats", {"g0": [0.0]}), (INTEL, 0), (INTEL, 2))
    assert notes_of(tmp_path / "b") == [
        "Every cell ran on one machine: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, torch 2.5.1."
    ]


def test_cells_without_a_host_record_are_said_so_with_the_host_name_their_status_gives(tmp_path, repo):
    hosted(craft(tmp_path, repo, "none-s0", 0, "none", {"g0": [0.0]}), (INTEL, 0))
    old = craft(tmp_path, repo, "pats-s0", 0, "pats", {"g0": [0.0]})
    write_status(old, CellStatus(status="finished", host="vm", pid=1))
    craft(tmp_path, repo, "pats-s1", 1, "pats", {"g0": [0.0]})  # no status.json either
    assert notes_of(tmp_path) == [
        "Host not recorded for pats-s0, pats-s1 (run before pats wrote host.json; their status.json names "
        "only the host name (vm), not the machine): which machine each ran on is not known."
    ]


def test_one_cell_without_a_host_record_or_a_status_is_said_so_alone(tmp_path, repo):
    hosted(craft(tmp_path, repo, "none-s0", 0, "none", {"g0": [0.0]}), (INTEL, 0))
    craft(tmp_path, repo, "pats-s0", 0, "pats", {"g0": [0.0]})
    assert notes_of(tmp_path) == [
        "Host not recorded for pats-s0 (run before pats wrote host.json): which machine it ran on is not known."
    ]


def test_the_committed_stage1_cells_are_not_guessed_to_share_a_machine(repo):
    """Stage 1's seed 2 ran on two machines (its journal), and every cell's status.json says host 'vm':
    compare says the host was not recorded, for every cell, and claims no machine."""
    stage1 = repo / "bench/results/sweeps/stage1"
    result = compare([read_run(d) for d in run_dirs([stage1])], ["stage1-none"])
    cells = ", ".join(f"stage1-{c}-s{s}" for c in ("none", "pats-expert", "pats") for s in (0, 1, 2))
    assert [n for n in result.notes if "host" in n.lower() or "machine" in n] == [
        f"Host not recorded for {cells} (run before pats wrote host.json; their status.json names only the "
        "host name (vm), not the machine): which machine each ran on is not known."
    ]


def test_a_start_whose_step_the_trainer_chose_is_named_without_one(tmp_path, repo):
    """verl's resume records no step (None): the machine is named without '(from step ...)', and a
    machine a cell came back to is named once, with the step it first trained."""
    hosted(craft(tmp_path, repo, "none-s0", 0, "none", {"g0": [0.0]}), (INTEL, 0))
    hosted(craft(tmp_path, repo, "pats-s0", 0, "pats", {"g0": [0.0]}), (INTEL, 3), (EPYC, None), (INTEL, 9))
    assert notes_of(tmp_path) == [
        "seed 0: its cells ran on different hardware: none-s0 on Intel(R) Xeon(R) Platinum 8481C CPU @ "
        "2.70GHz, torch 2.5.1; pats-s0 on Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz, torch 2.5.1 "
        "(from step 3), then AMD EPYC 7B13 64-Core Processor, torch 2.5.1. Sampling numerics can differ "
        "between machines, so the seed's conditions did not play exactly alike."
    ]


def test_cells_without_a_host_record_on_two_host_names_name_both(tmp_path, repo):
    for seed, host in ((0, "vm"), (1, "gpu-box"), (2, "vm")):
        old = craft(tmp_path, repo, f"pats-s{seed}", seed, "pats", {"g0": [0.0]})
        write_status(old, CellStatus(status="finished", host=host, pid=1))
    assert notes_of(tmp_path) == [
        "Host not recorded for pats-s0, pats-s1, pats-s2 (run before pats wrote host.json; their status.json "
        "names only the host name (gpu-box, vm), not the machine): which machine each ran on is not known."
    ]
