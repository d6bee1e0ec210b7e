"""`pats compare`'s notes on where the cells trained (pats.host): a seed whose cells ran on different
hardware (CPU model or torch version) is named with each cell's machines, since sampling numerics, and
with them a seed's episodes, can differ between machines; cells without a host record are named as
such, never guessed from a host name that does not say which machine it was."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pats.compare.notes import seeds_text
from pats.compare.runs import RunRecord
from pats.host import Machine


def _machines(r: RunRecord) -> tuple[Machine, ...]:
    return r.hosts.machines() if r.hosts is not None else ()


def _where(r: RunRecord) -> str:
    """Cell `r`'s machines, with the step each took over from where there are several."""
    assert r.hosts is not None, "only recorded cells are described"
    firsts: dict[Machine, int | None] = {}
    for start in r.hosts.starts:
        firsts.setdefault(start.machine, start.step)
    if len(firsts) == 1:
        return f"{r.run_dir.name} on {next(iter(firsts)).text()}"
    parts = [m.text() + (f" (from step {s})" if s is not None else "") for m, s in firsts.items()]
    return f"{r.run_dir.name} on {', then '.join(parts)}"


def host_notes(groups: Mapping[str, Sequence[RunRecord]]) -> list[str]:
    """The seeds whose cells ran on different machines, and the cells whose machine is not recorded;
    when every cell is recorded and all ran on one machine, that machine."""
    runs = [r for rs in groups.values() for r in rs]
    unknown = [r for r in runs if r.hosts is None]
    notes = []
    for seed in sorted({r.seed for r in runs}):
        mine = [r for r in runs if r.seed == seed and r.hosts is not None]
        if len({m for r in mine for m in _machines(r)}) > 1:
            notes.append(
                f"{seeds_text([seed])}: its cells ran on different hardware: {'; '.join(map(_where, mine))}. "
                "Sampling numerics can differ between machines, so the seed's conditions did not play "
                "exactly alike."
            )
    if unknown:
        names = sorted({r.host_name for r in unknown if r.host_name})
        said = (
            f"; their status.json names only the host name ({', '.join(names)}), not the machine"
            if names
            else ""
        )
        notes.append(
            f"Host not recorded for {', '.join(r.run_dir.name for r in unknown)} (run before pats wrote "
            f"host.json{said}): which machine {'it' if len(unknown) == 1 else 'each'} ran on is not known."
        )
    machines = {m for r in runs for m in _machines(r)}
    if runs and not unknown and len(machines) == 1:
        notes.append(f"Every cell ran on one machine: {next(iter(machines)).text()}.")
    return notes
