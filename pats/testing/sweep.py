"""Runs in milliseconds for sweep and compare tests: pats' own `train()` (engine, scaffold, review,
event log, checkpoints and resume) on `FakeEnv` tasks with a `ScriptedBackend` in place of the model.

`scripted_trainers(step_s)` is a drop-in for `pats.engine.run.TRAINERS`: `run_spec(spec, trainers)`,
`resume(run_dir, trainers)` and `pats.sweep.run_sweep(..., trainers=...)` train any local-backend spec
with it. The spec's environment and policy sections are ignored (FakeEnv's 4 training and 4 held-out
tasks, the scripted policy); its seed, trainer, scaffold, eval and logging sections are used. Specs
should set `eval.gap_tasks=0` (the likelihood gap needs a real model).
"""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from pats.spec.models import ExperimentSpec
from pats.testing.fakes import FakeEnv, ScriptedBackend, improving_schedule


class _SlowBackend(ScriptedBackend):
    """A ScriptedBackend whose update takes `step_s` seconds of wall time (a window to kill a run in),
    and with `dies` ends its process at its first update, as a crash or the kernel's OOM killer would;
    with `stops` sends its own process SIGTERM there, as `kill PID` would; with `hold` (a file path) every
    update after the first waits until that file exists, so a test can signal a run mid-step however
    slowly the machine starts it."""

    def __init__(self, seed: int, step_s: float, dies: bool = False, stops: bool = False, hold: str = ""):
        super().__init__(improving_schedule(), seed=seed)
        self.step_s = step_s
        self.dies = dies
        self.stops = stops
        self.hold = hold
        self.updates = 0

    async def update(self, played):
        if self.stops:
            self.stops = False
            os.kill(os.getpid(), signal.SIGTERM)
        while self.hold and self.updates and not Path(self.hold).exists():
            time.sleep(0.05)  # short sleeps: a signal's Python handler runs between them
        self.updates += 1
        time.sleep(self.step_s)  # blocks like a real update, so a signal lands mid-step
        if self.dies:
            os._exit(9)
        return await super().update(played)


def scripted_train(
    spec: ExperimentSpec,
    run_dir: Path,
    state,
    step_s: float = 0.0,
    dies: str = "",
    stops: str = "",
    hold: str = "",
) -> Path:
    """`train()` of `spec` with FakeEnv and the scripted policy (a `Trainer` of pats.engine.run); the
    run named `dies` ends its process at its first update, the one named `stops` is sent SIGTERM there
    (it stops after that step, checkpointed); with `hold`, every run's updates after the first wait for
    that file (`_SlowBackend`). It prints one line as it starts, with the
    threads its spec gives it and the niceness of the process it runs in."""
    threads = getattr(spec.trainer, "threads", None)
    print(f"scripted training of {spec.name} (threads {threads}, niceness {os.nice(0)})", flush=True)
    return train_on_fakes(
        spec,
        run_dir,
        state,
        lambda s: _SlowBackend(s.seed, step_s, dies=s.name == dies, stops=s.name == stops, hold=hold),
    )


def train_on_fakes(
    spec: ExperimentSpec, run_dir: Path, state, backend: Callable[[ExperimentSpec], ScriptedBackend]
) -> Path:
    """`train()` of `spec` on FakeEnv's 4 tasks with the policy `backend(spec)` makes."""
    from pats.engine.run import train

    return asyncio.run(
        train(
            spec,
            run_dir,
            state,
            env_factory=lambda s: lambda: FakeEnv(num_tasks=4),
            backend_for=lambda s, make_env: backend(s),
            count_tokens=lambda text: len(text.split()),
        )
    )


def scripted_trainers(
    step_s: float = 0.0, dies: str = "", stops: str = "", hold: str = ""
) -> Mapping[str, object]:
    """`TRAINERS` with the local backend trained by `scripted_train`; picklable (Ray tasks take it)."""
    return {"local": functools.partial(scripted_train, step_s=step_s, dies=dies, stops=stops, hold=hold)}
