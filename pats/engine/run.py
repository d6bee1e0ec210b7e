"""`pats run`: build every component from a spec, train in a run directory, checkpoint, resume.

A run directory (`<logging.root>/<name>/`) holds:
  spec.yaml        the resolved spec (resume reads it back)
  events.jsonl     versioned event log (cards, verdicts, edits, versions, metrics, evaluations)
  metrics.jsonl    one line of metrics per step (and per evaluation)
  scaffold/        every scaffold version (versions/NNNNNN.json) and current.md
  checkpoints/     step_NNNNNN/ (policy, judge state, state.json) and latest.json
  host.json        each start's machine: CPU model and torch version (pats.host)
  wandb/           the W&B run (offline unless logging.wandb says otherwise)
  report/          plots and summary.md (`pats report`)

A refused run leaves nothing behind: `pats run` removes what it wrote when it stops before any step
ended (a folder that held something before keeps that), and `train` loads everything that can refuse
(environment, model, checkpoint) before it writes, so a refused `--resume` leaves the run as it was.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pats.engine.loop import Engine
from pats.engine.progress import ProgressSink
from pats.engine.sampler import TaskSampler
from pats.errors import PrerequisiteError, RunInterrupted, SpecError, TrainingError
from pats.fileio import write_atomic
from pats.host import record_start
from pats.logging.events import StepEndEvent, read_events
from pats.logging.sinks import WandbSink
from pats.registry import ENVIRONMENTS
from pats.spec import ExperimentSpec, load_spec, spec_to_yaml
from pats.spec.loader import missing_files
from pats.step_end import restore
from pats.types import JudgeState, Record, ScaffoldState

KEEP_CHECKPOINTS = 2


def run_dir_for(spec: ExperimentSpec) -> Path:
    return Path(spec.logging.root) / spec.name


def new_run(spec: ExperimentSpec) -> Path:
    run_dir = run_dir_for(spec)
    if (run_dir / "events.jsonl").exists():
        raise SpecError(
            f"{run_dir} already holds a run; continue it with `pats run --resume {run_dir}`, "
            f"or start another with a new name, e.g. name={spec.name}-2"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / "spec.yaml", spec_to_yaml(spec))
    return run_dir


class Checkpoint(Record):
    """checkpoints/step_NNNNNN/state.json and checkpoints/latest.json: where a run resumes."""

    step: int  # the last finished step
    path: str  # the checkpoint folder (the backend's weights under it)
    wandb_id: str | None = None  # the W&B run to continue
    scaffold_version: int = 0  # the store's version at this step; later ones are dropped on resume
    judge: JudgeState = JudgeState({})  # the judge's state at this step

    def scaffold_state(self) -> ScaffoldState:
        """The scaffold side of the checkpoint's step, what `pats.step_end.restore` cuts back to."""
        return ScaffoldState(step=self.step, scaffold_version=self.scaffold_version, judge=self.judge)


def load_run(run_dir: Path) -> tuple[ExperimentSpec, Checkpoint | None]:
    """The run's resolved spec and its latest checkpoint (None before the first)."""
    if not (run_dir / "spec.yaml").is_file():
        raise PrerequisiteError(f"{run_dir} is not a pats run directory (no spec.yaml); give runs/<name>")
    return load_spec(run_dir / "spec.yaml"), latest_checkpoint(run_dir)


def latest_checkpoint(run_dir: Path) -> Checkpoint | None:
    """The run's latest checkpoint, its `path` under `run_dir` whatever folder it was saved in: a run
    directory that was moved or copied (a sweep folder, say) resumes from its own checkpoints."""
    latest = run_dir / "checkpoints" / "latest.json"
    if not latest.is_file():
        return None
    try:
        state = Checkpoint.model_validate_json(latest.read_text())
    except ValidationError as err:
        raise PrerequisiteError(
            f"{latest} is not a checkpoint this version of pats can read ({err.error_count()} problems, "
            f"first: {err.errors()[0]['msg']}); restore it from the step_* folder's state.json beside it"
        ) from None
    return state.model_copy(update={"path": str(run_dir / "checkpoints" / Path(state.path).name)})


def make_env_factory(spec: ExperimentSpec):
    import pats.envs  # noqa: F401  (registers the built-in environments)

    make = ENVIRONMENTS.get(spec.environment.kind)
    return lambda: make(spec.environment)


def make_backend(spec: ExperimentSpec, make_env):
    """The policy backend the pats engine drives: the local one (verl trains through its own trainer)."""
    if spec.trainer.backend != "local":
        raise PrerequisiteError(
            f"trainer.backend: {spec.trainer.backend} trains through its own trainer, not the pats "
            "engine; `pats run SPEC` launches it (see docs/verl.md)"
        )
    from pats.backends.local.backend import LocalBackend

    return LocalBackend(spec, make_env)


async def train(
    spec: ExperimentSpec,
    run_dir: Path,
    state: Checkpoint | None = None,
    env_factory: Callable[[ExperimentSpec], Callable[[], Any]] | None = None,
    backend_for: Callable[[ExperimentSpec, Callable[[], Any]], Any] | None = None,
    count_tokens: Callable[[str], int] | None = None,
) -> Path:
    """Train from scratch (state None) or from a checkpoint state; returns the run directory. The
    environment factory, backend and token counter are the spec's (`make_env_factory`, `make_backend`,
    the policy's tokenizer) unless given: pats.testing.sweep trains with fakes in their place."""
    from pats.models import token_counter

    # What can refuse (the model and its LoRA, the environment, the checkpoint's weights) comes before
    # anything is written, so a refused resume leaves its run directory as it was. The backend first:
    # it sets process-wide options (threads, malloc arenas) before the environments start threads.
    make_env = (env_factory or make_env_factory)(spec)  # looked up now: tests patch the module's names
    backend = (backend_for or make_backend)(spec, make_env)
    env = make_env()  # lists tasks and expert plans; episodes get their own instances
    train_tasks, eval_tasks = env.tasks("train"), env.tasks("eval")
    eval_tasks = eval_tasks[spec.eval_tasks()]
    start = state.step + 1 if state else 0  # the first step this invocation trains
    count_tokens = count_tokens or token_counter(spec.policy.model)
    if state:
        backend.load(Path(state.path))
    likelihood_gap = await _likelihood_gap(spec, env, backend, train_tasks)
    end = restore(  # the scaffold side, events and metrics cut back to the checkpoint (the resume rule)
        spec,
        run_dir,
        count_tokens,
        env.expert_plan,
        task_types=sorted({t.type for t in train_tasks}),
        state=state.scaffold_state() if state else None,
    )
    record_start(run_dir, start)  # the machine this start trains on (pats compare reads it)
    scaffold = end.scaffold
    sinks = list(end.sinks)
    wandb_id = state.wandb_id if state else None
    if spec.logging.wandb != "disabled":
        os.environ.setdefault("WANDB_DIR", str(run_dir))
        wandb_sink = WandbSink(
            run_dir,
            spec.logging.project,
            spec.logging.entity,
            spec.logging.wandb,
            spec.name,
            spec.model_dump(mode="json"),
            run_id=wandb_id,
            group=spec.logging.group,
        )
        sinks.append(wandb_sink)
        wandb_id = wandb_sink.run_id
    progress = ProgressSink(spec, start=start) if spec.logging.progress else None
    if progress:
        sinks.append(progress)

    def checkpoint(step: int) -> None:
        folder = run_dir / "checkpoints" / f"step_{step:06d}"
        backend.save(folder)
        side = end.state(step)
        saved = Checkpoint(
            step=step,
            path=str(folder),
            wandb_id=wandb_id,
            scaffold_version=side.scaffold_version,
            judge=side.judge,
        ).model_dump_json(indent=1)
        write_atomic(folder / "state.json", saved)
        write_atomic(run_dir / "checkpoints" / "latest.json", saved)
        for old in sorted((run_dir / "checkpoints").glob("step_*"))[:-KEEP_CHECKPOINTS]:
            shutil.rmtree(old, ignore_errors=True)

    engine = Engine(
        likelihood_gap=likelihood_gap,
        spec=spec,
        backend=backend,
        scaffold=scaffold,
        sampler=TaskSampler(train_tasks, spec.trainer.tasks_per_step, spec.seed),
        eval_tasks=eval_tasks,
        pool_tasks=train_tasks if spec.eval.pool else (),
        events=end.events,
        sinks=sinks,
        checkpoint=checkpoint,
    )
    received = _stop_on_signals(engine)
    try:
        stopped = await engine.run(start_step=start)
    except asyncio.CancelledError:
        if not received:
            raise
        raise RunInterrupted(
            f"stopped at once on a second signal; the step in flight is lost. {_resume_hint(run_dir)}",
            received[-1],
        ) from None
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise TrainingError(
            f"the disk is full ({err}); the run stopped. {_resume_hint(run_dir)} once there is space"
        ) from err
    finally:
        _restore_signals()
        engine.events.close()
        for sink in sinks:
            sink.close()
        await backend.close()
        await env.close()
    if stopped is not None:
        raise RunInterrupted(
            f"stopped at your request after step {stopped} (checkpointed). {_resume_hint(run_dir)}",
            received[-1] if received else signal.SIGINT,
        )
    return run_dir


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def _likelihood_gap(spec: ExperimentSpec, env, backend, train_tasks):
    """The gap's measurement over the expert pairs of the first `eval.gap_tasks` training tasks, or
    None (with a line on stderr) where it cannot be measured."""
    n = spec.eval.gap_tasks
    if n == 0:
        return None
    if spec.policy.action != "score":
        print("note: eval.gap_tasks needs policy.action: score on the local backend; no likelihood gap",
              file=sys.stderr)  # fmt: skip
        return None
    from pats.backends.local.reliance import LikelihoodGap, expert_pairs

    pairs = await expert_pairs(env, train_tasks[:n])
    if not pairs:
        print(f"note: no winning expert plan among {n} training tasks; no likelihood gap", file=sys.stderr)
        return None
    return LikelihoodGap(backend, pairs).measure


def _stop_on_signals(engine: Engine) -> list[int]:
    """SIGINT/SIGTERM: finish the step in flight, checkpoint it, stop. A second one stops at once
    (the step in flight is lost; the last checkpoint is intact). Returns the signals received."""
    received: list[int] = []
    loop, main = asyncio.get_running_loop(), asyncio.current_task()
    assert main is not None, "called from a task (train's)"

    def handle(signum: int) -> None:
        received.append(signum)
        if len(received) > 1:
            main.cancel()
            return
        engine.stop_requested = True
        print(
            f"\n{signal.Signals(signum).name}: stopping after the step in flight (it is checkpointed); "
            "send it again to stop at once",
            file=sys.stderr,
            flush=True,
        )

    try:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, handle, sig)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
        pass
    return received


def _restore_signals() -> None:
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        try:
            loop.remove_signal_handler(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass


def _resume_hint(run_dir: Path) -> str:
    state = latest_checkpoint(run_dir)
    step = state.step if state else None
    where = f"its last checkpoint is step {step}" if step is not None else "it has no checkpoint yet"
    return f"The run directory is intact ({where}): continue with `pats run --resume {run_dir}`"


def check_inputs(spec: ExperimentSpec) -> None:
    """Before anything is written or loaded: the policy's inputs (`check_policy_inputs`); LiteLLM
    knows each LLM's provider, and each LLM the run calls answers one short request (see
    pats.llm_check), so a misconfigured one stops the run here instead of leaving every review to the
    rules reviser."""
    from pats.llm_check import check_providers, preflight

    check_policy_inputs(spec)
    check_providers(spec)
    preflight(spec)


def check_policy_inputs(spec: ExperimentSpec) -> None:
    """What playing the policy needs, before a model loads: every file the spec names exists, and the
    local backend's trainer.device exists on this machine. `pats run` checks it as part of
    `check_inputs`; the benchmarks' probes, which play without training or LLMs, check only this."""
    missing = missing_files(spec)
    if missing:
        raise SpecError(missing)
    if spec.trainer.backend == "local":
        from pats.backends.local.device import require_device

        require_device(spec.trainer)  # trainer.device: cuda on a machine without one stops here


def _train_locally(spec: ExperimentSpec, run_dir: Path, state: Checkpoint | None) -> Path:
    return asyncio.run(train(spec, run_dir, state))


def _train_with_verl(spec: ExperimentSpec, run_dir: Path, state: Checkpoint | None) -> Path:
    """verl resumes from its own checkpoints under <run_dir>/checkpoints (resume_mode=auto), and the
    scaffold service cuts the scaffold side back to their step (pats.backends.verl.service)."""
    from pats.backends.verl.launch import run_verl

    record_start(run_dir, None)  # the launching machine; verl finds the step it resumes from
    return run_verl(spec, run_dir)


# trainer.backend -> how a run of that backend trains, fresh (state None) or resumed: the one lookup
# `pats run` and `pats run --resume` use for both backends (its keys are the spec's backend kinds).
Trainer = Callable[[ExperimentSpec, Path, "Checkpoint | None"], Path]
TRAINERS: Mapping[str, Trainer] = {"local": _train_locally, "verl": _train_with_verl}


def run_spec(spec: ExperimentSpec, trainers: Mapping[str, Trainer] = TRAINERS) -> Path:
    """`pats run SPEC`: check, then train in a new run directory; `trainers` replaces the lookup
    above (pats sweep passes it on, so its tests can train with fakes)."""
    check_inputs(spec)
    run_dir = run_dir_for(spec)
    made = _missing_folders(run_dir)
    before = set(run_dir.iterdir()) if run_dir.is_dir() else set()
    try:
        return trainers[spec.trainer.backend](spec, new_run(spec), None)
    except RunInterrupted:
        raise  # its message points at the run directory to resume
    except BaseException:
        if not _holds_a_step(run_dir):  # refused (or failed) before any step ended: nothing to resume
            _remove_new(run_dir, before, made)
        raise


def _missing_folders(run_dir: Path) -> list[Path]:
    """The run directory and those of its parents that do not exist yet, deepest first."""
    return [folder for folder in (run_dir, *run_dir.parents) if not folder.exists()]


def _holds_a_step(run_dir: Path) -> bool:
    events = run_dir / "events.jsonl"
    return (run_dir / "checkpoints" / "latest.json").exists() or (
        events.is_file() and bool(read_events(events, StepEndEvent))
    )


def _remove_new(run_dir: Path, before: set[Path], made: list[Path]) -> None:
    """What this invocation wrote into the run directory, and the folders it created, if empty now;
    what was there before stays."""
    if run_dir.is_dir():
        for path in set(run_dir.iterdir()) - before:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    for folder in made:  # deepest first; one another process has written into since stays
        try:
            folder.rmdir()
        except OSError:
            break


def resume(run_dir: Path, trainers: Mapping[str, Trainer] = TRAINERS) -> Path:
    spec, state = load_run(run_dir)
    check_inputs(spec)
    return trainers[spec.trainer.backend](spec, run_dir, state)
