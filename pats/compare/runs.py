"""What `pats compare` reads from each run: one typed record per run directory, from its spec and its
event log alone (a finished run, a crashed one, or one still going).

A run's condition is its spec's name without the `-s<seed>` that `pats sweep` appends, so the cells of
a sweep, and runs named that way by hand, group by condition. Held-out outcomes are the per-game
successes of the run's last evaluation of a trained checkpoint (the checkpoint after its last evaluated
step), without and with the scaffold; or, when `pats eval` measured the run's latest checkpoint since (a
larger held-out set, say), its `report/outcomes_eval.json`. The evaluation before training
(`eval.at_start`, step -1) is kept apart, with what it depends on (`Start`), for the untrained row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

from pats.compare.start import Start, start_of
from pats.errors import PrerequisiteError
from pats.host import Hosts, read_hosts

Outcomes = dict[str, tuple[float, ...]]  # game id -> its episodes' successes


@dataclass(frozen=True)
class RunRecord:
    run_dir: Path
    condition: str
    seed: int
    scaffold_mode: str
    steps_planned: int
    steps_done: int
    eval_step: int | None  # the step whose checkpoint the last evaluation measured (None: never evaluated)
    heldout: Outcomes  # without the scaffold
    heldout_with_scaffold: Outcomes
    heldout_source: str  # "training" (the last eval event) or "pats eval" (report/outcomes_eval.json)
    train_success: float  # mean over the steps done
    informative_fraction: float
    plan_fraction: float  # groups shown a plan of their task (coverage/plan_fraction), mean over steps
    prompt_tokens: float  # per rollout, mean over steps
    scaffold_entries: float  # after the last step
    scaffold_tokens: float
    edits: int  # ADD + UPDATE + DELETE over the run
    removals: int  # DELETE
    curves: dict[str, tuple[tuple[int, float], ...]]  # metric -> (step, value), steps and evaluations
    at_start: Outcomes  # the untrained policy's, without the scaffold (eval.at_start; {}: none)
    start: Start  # what that evaluation depends on, but the seed
    # What the policy was trained on: each scaffold version after the empty one as (step, content
    # hash), () for a run that never had guidance; and the spec's parts training depends on besides the
    # scaffold (environment, policy, trainer, warm start) as JSON. Two runs of a seed equal in both saw
    # the same prompts: pats.compare.notes.history_notes.
    scaffold_history: tuple[tuple[int, str], ...]
    setup: str
    hosts: Hosts | None  # the machines it trained on (host.json); None: not recorded (older runs)
    host_name: str  # the host name a sweep's status.json gives ("" where there is none)


CURVES = ("train/success", "train/informative_fraction", "scaffold/tokens")
EVAL_CURVES = ("eval/success", "eval_with_scaffold/success")


def condition_of(name: str, seed: int) -> str:
    suffix = f"-s{seed}"
    return name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else name


def read_run(run_dir: Path) -> RunRecord:
    from pats.engine.run import load_run
    from pats.logging.events import EvalEvent, StepEndEvent, read_events
    from pats.sweep.record import read_status

    spec, _ = load_run(run_dir)
    path = run_dir / "events.jsonl"
    steps = [(e.step, e.metrics) for e in read_events(path, StepEndEvent)] if path.is_file() else []
    evals = read_events(path, EvalEvent) if path.is_file() else []
    trained = [e for e in evals if e.step >= 0]  # step -1: the untrained policy (eval.at_start)
    last = max(trained, key=lambda e: e.step) if trained else None
    before = next((e for e in evals if e.step < 0), None)

    def mean(key: str) -> float:
        values = [m[key] for _, m in steps if key in m]
        return fmean(values) if values else float("nan")

    def total(key: str) -> int:
        return int(sum(m.get(key, 0.0) for _, m in steps))

    heldout = dict(last.outcomes) if last else {}
    with_scaffold = dict(last.outcomes_with_scaffold) if last else {}
    source, eval_step = "training", last.step if last else None
    played = _pats_eval(run_dir)
    if played is not None and (eval_step is None or played.checkpoint_step >= eval_step):
        heldout, with_scaffold = dict(played.outcomes), dict(played.outcomes_with_scaffold)
        source, eval_step = "pats eval", played.checkpoint_step
    final = steps[-1][1] if steps else {}
    curves = {k: tuple((s, m[k]) for s, m in steps if k in m) for k in CURVES}
    curves |= {k: tuple((e.step, e.metrics[k]) for e in evals if k in e.metrics) for k in EVAL_CURVES}
    return RunRecord(
        run_dir=run_dir,
        condition=condition_of(spec.name, spec.seed),
        seed=spec.seed,
        scaffold_mode=spec.scaffold.mode,
        steps_planned=spec.trainer.steps,
        steps_done=len(steps),
        eval_step=eval_step,
        heldout=heldout,
        heldout_with_scaffold=with_scaffold,
        heldout_source=source,
        train_success=mean("train/success"),
        informative_fraction=mean("train/informative_fraction"),
        plan_fraction=mean("coverage/plan_fraction"),
        prompt_tokens=mean("train/prompt_tokens"),
        scaffold_entries=final.get("scaffold/entries", 0.0),
        scaffold_tokens=final.get("scaffold/tokens", 0.0),
        edits=total("edits/ADD") + total("edits/UPDATE") + total("edits/DELETE"),
        removals=total("edits/DELETE"),
        curves={k: v for k, v in curves.items() if v},
        at_start=dict(before.outcomes) if before else {},
        start=start_of(spec),
        scaffold_history=_scaffold_history(run_dir),
        setup=json.dumps(spec.model_dump(mode="json", include=SETUP), sort_keys=True),
        hosts=read_hosts(run_dir),
        host_name=status.host if (status := read_status(run_dir)) is not None else "",
    )


# The spec's sections training depends on: all but the scaffold's making, evaluation and logging.
SETUP = {"environment", "policy", "trainer", "warm_start"}


def _scaffold_history(run_dir: Path) -> tuple[tuple[int, str], ...]:
    from pats.scaffold.store import ScaffoldStore

    store = ScaffoldStore.open(run_dir / "scaffold", count_tokens=len, view_tokens=1)  # none there: empty
    return tuple((v.step, v.hash) for v in store.versions()[1:])


def _pats_eval(run_dir: Path):
    """`pats eval`'s outcomes of the held-out split when they measured the run's latest checkpoint."""
    from pats.engine.evaluate import EvalOutcomes, outcomes_path
    from pats.engine.run import latest_checkpoint

    path = outcomes_path(run_dir, "eval")
    state = latest_checkpoint(run_dir)
    if not path.is_file() or state is None:
        return None
    played = EvalOutcomes.model_validate_json(path.read_text(encoding="utf-8"))
    return played if played.checkpoint_step == state.step else None


def run_dirs(paths: Sequence[str | Path]) -> list[Path]:
    """Each argument is a run directory (holds spec.yaml) or a folder of them: a sweep (its sweep.json's
    cells, found by name under it, never elsewhere; refused when cells it names are not there:
    `pats.sweep.manifest.cell_dirs`), else every subfolder that holds a run."""
    from pats.sweep.manifest import MANIFEST, cell_dirs

    found: list[Path] = []
    for arg in map(Path, paths):
        if (arg / "spec.yaml").is_file():
            found.append(arg)
        elif (arg / MANIFEST).is_file():
            found += cell_dirs(arg)
        elif arg.is_dir() and any((sub / "spec.yaml").is_file() for sub in arg.iterdir()):
            found += sorted(sub for sub in arg.iterdir() if (sub / "spec.yaml").is_file())
        else:
            raise PrerequisiteError(
                f"{arg} is neither a pats run (no spec.yaml) nor a folder of runs; give runs/<name> or a "
                "sweep folder (runs/sweeps/<sweep>)"
            )
    return list(dict.fromkeys(found))


def unread_cells(paths: Sequence[str | Path]) -> list[str]:
    """For each sweep folder among `paths`, the cells of its sweep.json that hold no run to compare (a
    cell that failed before its run existed, one not started), each with why, as one note per folder:
    such cells would otherwise leave the comparison without a word."""
    from pats.sweep.manifest import MANIFEST, read_manifest

    notes = []
    for arg in map(Path, paths):
        manifest = None if (arg / "spec.yaml").is_file() else read_manifest(arg)
        if manifest is None:
            continue
        why = [
            f"{c.folder} ({_no_run(arg / c.folder)})"
            for c in manifest.cells
            if not (arg / c.folder / "spec.yaml").is_file()
        ]
        if why:
            n = len(why)
            notes.append(
                f"{arg / MANIFEST} names {n} cell{'s' if n > 1 else ''} of {len(manifest.cells)} with no run "
                f"to compare, left out of the table: {'; '.join(why)}. `pats sweep status {arg}` shows "
                "each cell; rerunning the sweep runs those not finished."
            )
    return notes


def _no_run(folder: Path) -> str:
    """Why a sweep cell's folder holds no run, from its status.json."""
    from pats.sweep.record import read_status

    if not folder.is_dir():
        return "not started"
    status = read_status(folder)
    if status is None:
        return "no run and no readable status.json in its folder"
    if status.status == "failed":
        error = status.error.strip()
        return f"failed before its run existed: {error.splitlines()[0] if error else 'no error recorded'}"
    return {
        "pending": "not started yet",
        "running": "started, its run not written yet",
        "interrupted": "interrupted before its run existed",
    }.get(status.status, f"{status.status}, but its folder holds no run")
