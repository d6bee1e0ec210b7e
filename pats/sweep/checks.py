"""What `pats sweep` checks before any cell runs: where each cell stands, and the LLMs the cells to run
will call.

A cell is refused when its folder holds a run of another spec (whether or not that run finished), else
finished (skipped), to resume (it checkpointed), or to start. "Another spec" is decided on the resolved specs, not their text, and leaves aside
where the cell runs: `logging.root` (the folder the cell sat in when it ran: a sweep folder may move)
and `trainer.threads` (what the machine gave it); a path that moved with the sweep folder (the same
path relative to it) is the same path. Cells written by pats before issue 49, whose
spec.yaml holds the absolute folder they were written in, are accepted wherever the folder is now.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pats.errors import SpecError
from pats.spec.models import ExperimentSpec
from pats.sweep.grid import Cell

# read by type checkers only, so mutating it changes nothing a test could see
Check = Literal["finished", "resume", "start", "refused"]  # pragma: no mutate
WHERE = ("logging.root", "trainer.threads")  # where and how fast a cell runs, not what it trains


def finished(run_dir: Path, steps: int) -> bool:
    """The run logged its last step's end and, where it keeps pats checkpoints, checkpointed it."""
    from pats.engine.run import latest_checkpoint
    from pats.logging.events import StepEndEvent, read_events

    events = run_dir / "events.jsonl"
    if not events.is_file() or not any(e.step == steps - 1 for e in read_events(events, StepEndEvent)):
        return False
    state = latest_checkpoint(run_dir)
    return state is None or state.step == steps - 1


def check_cell(cell: Cell) -> tuple[Check, str]:
    """Where the cell stands, and for a refused one why and what to do."""
    run_dir = cell.run_dir
    saved = run_dir / "spec.yaml"
    # the spec before "finished": a finished cell rerun with a changed override (trainer.lr, say) would
    # otherwise be skipped, and sweep.json would list an override none of its cells trained with
    differs = spec_difference(saved, cell.spec) if saved.is_file() else ""
    if differs:
        return "refused", (
            f"{run_dir} holds a run of another spec than this cell's ({differs}: the sweep's specs or "
            "overrides changed); undo that change to go on with this sweep, or give the sweep another "
            "--name to run the changed cells beside it (or remove that folder to rerun the cell)"
        )
    if finished(run_dir, cell.spec.trainer.steps):
        return "finished", ""
    if (run_dir / "checkpoints" / "latest.json").is_file():
        return "resume", ""
    return "start", ""


def spec_difference(saved: Path, spec: ExperimentSpec) -> str:
    """'' when the run directory's spec.yaml is a run of `spec` (WHERE aside), else the keys that
    differ, with both values."""
    from pats.spec import load_spec, spec_to_yaml

    text = saved.read_text(encoding="utf-8")
    if text == spec_to_yaml(spec):
        return ""
    try:
        theirs = flat_fields(load_spec(saved).model_dump(mode="json"))
    except SpecError as err:
        return f"its spec.yaml does not load: {str(err).splitlines()[0]}"
    mine = flat_fields(spec.model_dump(mode="json"))
    keys = [
        k
        for k in sorted(theirs.keys() | mine.keys())
        if k not in WHERE and _value(theirs, k) != _value(mine, k) and not _moved_with(theirs, mine, k)
    ]
    shown = "; ".join(f"{k}: {_value(theirs, k)} there, {_value(mine, k)} here" for k in keys[:3])
    return shown + (f"; and {len(keys) - 3} more" if len(keys) > 3 else "")


def _moved_with(theirs: dict[str, Any], mine: dict[str, Any], key: str) -> bool:
    """Both values absolute paths that sit where they did relative to each side's `logging.root`: the
    repository moved or was cloned elsewhere with the sweep (a warm start's adapter under
    bench/results, say), so they name the same file."""
    root = "logging.root"
    if not all(k in side for k in (key, root) for side in (theirs, mine)):
        return False
    paths = (theirs[key], theirs[root], mine[key], mine[root])
    if not all(isinstance(p, str) and os.path.isabs(p) for p in paths):
        return False
    return os.path.relpath(paths[0], paths[1]) == os.path.relpath(paths[2], paths[3])


def _value(flat: dict[str, Any], key: str) -> str:
    return json.dumps(flat[key]) if key in flat else "(unset)"


def flat_fields(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested dump as dotted keys (`trainer.lr`), each leaf (or empty mapping) its value."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out |= flat_fields(value, f"{prefix}{key}.")
        else:
            out[prefix + key] = value
    return out


def preflight_llms(cells: Sequence[Cell]) -> None:
    """`pats run`'s LLM checks (LiteLLM knows each provider; one short request to each LLM) for every
    distinct set of judge and reviser LLMs the cells will call, once each, before any cell runs: a
    missing key or a server that is down stops the sweep here, not hours in when its cell starts."""
    from pats.llm_check import called_llms, check_providers, preflight

    seen: set[str] = set()
    for cell in cells:
        llms = called_llms(cell.spec)
        key = json.dumps([(path, llm.model_dump(mode="json")) for path, llm in llms])
        if not llms or key in seen:
            continue
        seen.add(key)
        check_providers(cell.spec, file=cell.source)
        preflight(cell.spec)
