"""`pats sweep`: run a grid's cells, one after another here, or as Ray tasks (pats/sweep/cluster.py) on
a Ray instance started here (`--ray local`, `--parallel N`) or on a cluster (`--ray ADDRESS`).

Before any cell runs, every cell is checked (pats/sweep/checks.py): finished ones are skipped,
interrupted ones will resume from their last checkpoint, one that died before its first checkpoint
starts over, and one whose folder holds a run of another spec is refused (with what to do), never
overwritten. The LLMs the cells to run will call answer one request each (`pats run`'s preflight).
Only then is `sweep.json` written (pats/sweep/manifest.py) and each cell to run marked `pending`
(pats/sweep/record.py). Each cell then runs through pats/sweep/cell.py: its output to CELL/log.txt as
well as the terminal, its status, times and error in CELL/status.json. A cell that fails is reported
and the others go on; the command exits 1 if any failed or was refused. A signal stops the sweep
(pats/sweep/stop.py): a rerun goes on from there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from pats.errors import RunInterrupted
from pats.sweep.cell import CellResult, line, run_cell, starting
from pats.sweep.checks import check_cell, finished, preflight_llms
from pats.sweep.grid import SweepSpec, cells, sweep_folder, sweep_name
from pats.sweep.manifest import row, write_manifest
from pats.sweep.record import pending_after, read_status, write_status
from pats.sweep.stop import interrupted_line, sweep_stopped
from pats.sweep.words import counted

__all__ = ["CellResult", "finished", "run_cell", "run_sweep"]


def run_sweep(
    sweep: SweepSpec,
    ray_address: str | None = None,
    say: Callable[[str], None] = print,
    trainers: Mapping | None = None,
    parallel: int | None = None,
) -> list[CellResult]:
    """Plan and check every cell, write sweep.json, then run the cells here (`ray_address` None) or as
    Ray tasks ("local": on a Ray started here; `parallel` N: each asking for 1/N of this machine); a
    summary line at the end. `trainers`: see `pats.engine.run.run_spec`."""
    from pats.sweep.cluster import asks_for, import_ray, run_ray

    asks = asks_for(sweep, parallel) if ray_address is not None else None
    planned = cells(sweep, asks.threads if asks else None)
    checks = [check_cell(cell) for cell in planned]
    runnable = [(i, cell) for i, (cell, (check, _)) in enumerate(zip(planned, checks, strict=True), 1)
                if check in ("resume", "start")]  # fmt: skip
    if ray_address is not None:
        import_ray()  # a missing Ray stops the sweep before anything is written
    preflight_llms([cell for _, cell in runnable])

    folder, name = sweep_folder(sweep), sweep_name(sweep)
    refused = {cell.name for cell, (check, _) in zip(planned, checks, strict=True) if check == "refused"}
    rows = [row(folder, c.name, c.condition, c.seed, c.source, c.overrides) for c in planned]
    write_manifest(folder, name, rows, refused)
    for _, cell in runnable:
        write_status(cell.run_dir, pending_after(read_status(cell.run_dir)))
    conditions = len({c.condition for c in planned})
    say(f"sweep {name}: {counted(len(planned), 'cell')} ({counted(conditions, 'condition')} x "
        f"{counted(len(sweep.seeds), 'seed')}) in {folder}")  # fmt: skip

    results: dict[int, CellResult] = {}
    for i, (cell, (check, why)) in enumerate(zip(planned, checks, strict=True), 1):
        if check in ("finished", "refused"):
            results[i] = CellResult(cell.name, "skipped" if check == "finished" else "refused", 0.0, why)
            say(line(i, len(planned), cell, results[i]))
    if asks is None or ray_address is None:  # here, one after another
        for i, cell in runnable:
            say(f"cell {i}/{len(planned)} {cell.name}: {starting(cell)}")
            try:
                results[i] = run_cell(cell, trainers)
            except RunInterrupted as err:  # a signal stopped its run after its step: the sweep stops
                say(interrupted_line(i, len(planned), cell, err))
                raise sweep_stopped(folder, [cell.name], err.signum) from None
            say(line(i, len(planned), cell, results[i]))
    elif runnable:
        results |= run_ray(runnable, len(planned), ray_address, asks, say, trainers)
    ordered = [results[i] for i in sorted(results)]
    counts = {
        s: sum(r.status == s for r in ordered) for s in ("ran", "resumed", "skipped", "refused", "failed")
    }
    say(f"sweep {name}: " + ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f"; `pats sweep status {_shown(folder)}` for each cell, `pats compare {_shown(folder)}` to compare them")  # fmt: skip
    return ordered


def _shown(folder: Path) -> str:
    """The folder as the user would type it: relative to the working directory when under it."""
    try:
        return str(folder.relative_to(Path.cwd()))
    except ValueError:
        return str(folder)
