"""`pats sweep`: run a grid's cells, one after another here or as Ray tasks on an existing cluster.

Each cell trains through `pats run`'s own entry points (`run_spec`, `resume`: the same checks, then
`train`), in its own run directory under the sweep's folder, so every cell is resumable on its own and
`pats compare` reads it like any run. Rerunning the same command skips finished cells, resumes
interrupted ones from their last checkpoint, and starts the rest; a cell that died before its first
checkpoint starts over. A cell whose folder holds a run of another spec is refused (with what to do),
never overwritten. A cell that fails is reported and the others go on; the command exits 1 if any did.

With `--ray ADDRESS` every cell is one Ray task asking for the sweep's `cpus` / `gpus`: Ray places and
queues them (no scheduler of pats' own). Run directories must then be on storage every node sees.
`sweep.json` in the sweep folder lists the cells (condition, seed, spec file, overrides, run folder).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pats.errors import PatsError, PrerequisiteError, RunInterrupted, install_hint
from pats.fileio import write_atomic
from pats.sweep.grid import Cell, SweepSpec, cells, sweep_name

Status = Literal["ran", "resumed", "skipped", "failed"]


@dataclass(frozen=True)
class CellResult:
    name: str
    status: Status
    seconds: float
    error: str = ""  # why a failed cell failed (its first lines)


def finished(run_dir: Path, steps: int) -> bool:
    """The run logged its last step's end and, where it keeps pats checkpoints, checkpointed it."""
    from pats.engine.run import latest_checkpoint
    from pats.logging.events import StepEndEvent, read_events

    events = run_dir / "events.jsonl"
    if not events.is_file() or not any(e.step == steps - 1 for e in read_events(events, StepEndEvent)):
        return False
    state = latest_checkpoint(run_dir)
    return state is None or state.step == steps - 1


def run_cell(cell: Cell, trainers: Mapping | None = None) -> CellResult:
    """Train one cell to its end: skip it if finished, resume it if it checkpointed, else start it."""
    from pats.engine.run import TRAINERS, resume, run_spec
    from pats.spec import spec_to_yaml

    trainers = trainers or TRAINERS
    run_dir, started = cell.run_dir, time.monotonic()
    status: Status
    try:
        if finished(run_dir, cell.spec.trainer.steps):
            return CellResult(cell.name, "skipped", 0.0)
        saved = run_dir / "spec.yaml"
        if saved.is_file() and saved.read_text(encoding="utf-8") != spec_to_yaml(cell.spec):
            raise PrerequisiteError(
                f"{run_dir} holds a run of another spec than this cell's (the sweep's specs or overrides "
                "changed); remove that folder to rerun the cell, or give the sweep another --name"
            )
        if (run_dir / "checkpoints" / "latest.json").is_file():
            resume(run_dir, trainers)
            status = "resumed"
        else:
            shutil.rmtree(run_dir, ignore_errors=True)  # died before its first checkpoint: start over
            run_spec(cell.spec, trainers)
            status = "ran"
    except RunInterrupted:
        raise  # the user stopped it: the sweep stops too
    except Exception as err:  # a failed cell is reported; the others go on
        kind = "" if isinstance(err, PatsError) else f"{type(err).__name__}: "
        return CellResult(cell.name, "failed", time.monotonic() - started, (kind + str(err))[:2000])
    finally:
        gc.collect()  # the next cell loads its own model
    return CellResult(cell.name, status, time.monotonic() - started)


def write_manifest(folder: Path, name: str, cells: Sequence[Cell]) -> Path:
    rows = [
        {"name": c.name, "condition": c.condition, "seed": c.seed, "spec": c.source,
         "overrides": list(c.overrides), "run_dir": str(c.run_dir)}
        for c in cells
    ]  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sweep.json"
    write_atomic(path, json.dumps({"name": name, "cells": rows}, indent=1))
    return path


def line(i: int, total: int, cell: Cell, result: CellResult) -> str:
    what = {
        "ran": f"ran in {result.seconds:.0f} s",
        "resumed": f"resumed and finished in {result.seconds:.0f} s",
        "skipped": "already finished, skipped",
        "failed": f"FAILED after {result.seconds:.0f} s: {result.error.splitlines()[0] if result.error else ''}",
    }[result.status]
    return f"cell {i}/{total} {cell.name}: {what} ({cell.run_dir})"


def run_local(
    cells: Sequence[Cell], say: Callable[[str], None], trainers: Mapping | None = None
) -> list[CellResult]:
    """One cell after another in this process."""
    results = []
    for i, cell in enumerate(cells, 1):
        say(f"cell {i}/{len(cells)} {cell.name}: starting")
        result = run_cell(cell, trainers)
        results.append(result)
        say(line(i, len(cells), cell, result))
    return results


def _cell_task(cell: Cell, trainers: Mapping | None, cwd: str) -> CellResult:
    """A Ray task: the driver's working directory where this node has it, then the cell."""
    if os.path.isdir(cwd):
        os.chdir(cwd)
    return run_cell(cell, trainers)


def run_ray(
    cells: Sequence[Cell],
    address: str | None,
    cpus: float,
    gpus: float,
    say: Callable[[str], None],
    trainers: Mapping | None = None,
) -> list[CellResult]:
    """Every cell a Ray task asking for `cpus` and `gpus`, on the cluster at `address` (None: the Ray
    this process already initialized); a line per cell as it ends, in the order they end."""
    try:
        import ray
    except ImportError:
        raise PrerequisiteError(f"--ray needs Ray, which comes with verl: {install_hint('verl')}") from None
    if not ray.is_initialized():
        ray.init(address=address)
    task = ray.remote(_cell_task).options(num_cpus=cpus, num_gpus=gpus, max_retries=0)
    pending = {task.remote(cell, trainers, os.getcwd()): (i, cell) for i, cell in enumerate(cells, 1)}
    say(f"submitted {len(cells)} cells as Ray tasks ({cpus:g} CPU, {gpus:g} GPU each)")
    results: dict[int, CellResult] = {}
    while pending:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        i, cell = pending.pop(ref)
        try:
            result = ray.get(ref)
        except Exception as err:  # the worker died (out of memory, a crash): the others go on
            result = CellResult(cell.name, "failed", 0.0, f"{type(err).__name__}: {err}"[:2000])
        results[i] = result
        say(line(i, len(cells), cell, result))
    return [results[i] for i in sorted(results)]


def run_sweep(
    sweep: SweepSpec,
    ray_address: str | None = None,
    say: Callable[[str], None] = print,
    trainers: Mapping | None = None,
) -> list[CellResult]:
    """Plan every cell (all validated first), write sweep.json, then run them here (`ray_address`
    None) or as Ray tasks; a summary line at the end. `trainers`: see `pats.engine.run.run_spec`."""
    planned = cells(sweep)
    folder = (Path(sweep.root) / sweep_name(sweep)).absolute()
    write_manifest(folder, sweep_name(sweep), planned)
    conditions = len({c.condition for c in planned})
    say(
        f"sweep {sweep_name(sweep)}: {len(planned)} cells ({conditions} conditions x {len(sweep.seeds)} seeds) in {folder}"
    )
    if ray_address is None:
        results = run_local(planned, say, trainers)
    else:
        results = run_ray(planned, ray_address, sweep.cpus, sweep.gpus, say, trainers)
    counts = {s: sum(r.status == s for r in results) for s in ("ran", "resumed", "skipped", "failed")}
    say(f"sweep {sweep_name(sweep)}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f"; compare them with `pats compare {folder}`")  # fmt: skip
    return results
