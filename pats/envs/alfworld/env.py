"""ALFWorld's TextWorld-PDDL household games behind the `Env` protocol.

Each `AlfworldEnv` owns one child process (`worker.py`) that plays its games with textworld and
alfworld's AlfredDemangler/AlfredInfos wrappers, the setup of alfworld's AlfredTWEnv; the parent
never imports textworld. Calls to the child run on one worker thread per instance, so the event loop
never blocks and many episodes step at once on separate cores. The child starts on the first reset
and stays up across episodes (a reset of the game already loaded skips the ~1 s load).

Where this departs from AlfredTWEnv and the published setups (verl-agent, GiGPO):
- The intro's "-= Welcome to TextWorld, ALFRED! =-" banner and its "Your task is to: ..." sentence
  are taken out of the first observation: the sentence becomes `task_description`, which the prompt
  shows on every turn.
- `admissible` is the game's sorted admissible commands without "help" (as verl-agent does).
- An action outside `admissible` (compared case- and space-insensitively) is not sent to the game:
  the step returns the previous observation with valid=False and a reason. The game would answer
  "Nothing happens." and change nothing, so the state is the same either way.
- Reward is 1.0 on the winning step, 0 otherwise; the episode ends when won. There is no step limit
  here: `max_turns` is enforced by the backend.
- A child that dies or hangs (no answer in CALL_TIMEOUT_S) fails the episode with EnvironmentFault;
  the next reset starts a new child.
"""

from __future__ import annotations

import importlib.util
import json
import select
import subprocess
import sys
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from pats.envs.admissible import check_step, normalize, rejected, spelling
from pats.envs.alfworld.data import GAME_FILE, data_source, list_games, split_dir
from pats.envs.worker import WorkerThread
from pats.errors import EnvironmentFault, PrerequisiteError
from pats.protocols import StepResult
from pats.registry import ENVIRONMENTS
from pats.spec.environments import AlfworldEnvSpec
from pats.types import Task

SPLITS = ("train", "valid_seen", "valid_unseen", "valid_train")
INSTALL = "pip install alfworld==0.4.2 'textworld[pddl]==1.7.0'"
WORKER = Path(__file__).with_name("worker.py")
CALL_TIMEOUT_S = 120.0  # a game start takes ~1 s and a step ~0.1 s; this only catches a hung child
BANNER = "-= Welcome to TextWorld, ALFRED! =-"
TASK_PREFIX = "Your task is to: "

# Walkthroughs per game file, shared by all instances in this process (read once from the game file).
_PLANS: dict[Path, tuple[str, ...]] = {}
_PLANS_LOCK = threading.Lock()


class AlfworldEnv:
    """One ALFWorld episode at a time, on a child process owned by this instance."""

    parses_output = False  # step() receives one admissible action

    def __init__(self, spec: AlfworldEnvSpec):
        self.spec = spec
        self.process_starts = 0  # child processes this instance has launched, restarts included
        self._worker = WorkerThread("AlfworldEnv", "alfworld")
        self._game: _Game | None = None
        self._splits: dict[str, Path] = {}
        # The episode in progress.
        self._task: Task | None = None
        self._last: StepResult | None = None
        self._spelling: dict[str, str] = {}  # normalized admissible action -> the game's spelling
        self._broken = False  # the child died during this episode

    def tasks(self, split: str) -> list[Task]:
        """'train' -> train_split (num_train_tasks games), 'eval' -> eval_split (num_eval_tasks); a
        split name gives that split with num_eval_tasks. Games are in the fixed order of task_seed."""
        name: str
        if split == "train":
            name, count = self.spec.train_split, self.spec.num_train_tasks
        elif split == "eval":
            name, count = self.spec.eval_split, self.spec.num_eval_tasks
        elif split in SPLITS:
            name, count = split, self.spec.num_eval_tasks
        else:
            raise ValueError(f"unknown split '{split}'; known: train, eval, {', '.join(SPLITS)}")
        games = list_games(self._split_dir(name), self.spec.task_types, self.spec.task_seed)
        return [
            Task(
                id=f"alfworld:{name}:{game}",
                type=kind,
                split=split,
                env="alfworld",
                payload={"split": name, "game": game},  # relative: the same task on every machine
            )
            for kind, game in games[:count]
        ]

    async def reset(self, task: Task) -> StepResult:
        return await self._worker.run(self._reset, task)

    async def step(self, action: str) -> StepResult:
        return await self._worker.run(self._step, action)

    def expert_plan(self, task: Task) -> list[str] | None:
        """The game's walkthrough (a winning action sequence stored in the game file)."""
        path = self._game_file(task)
        with _PLANS_LOCK:
            if path not in _PLANS:
                _PLANS[path] = tuple(json.loads(path.read_text(encoding="utf-8")).get("walkthrough") or ())
            return list(_PLANS[path]) or None

    async def close(self) -> None:
        await self._worker.close(self._stop)

    @property
    def pid(self) -> int | None:
        """Process id of the running game process (None before the first reset and after a fault)."""
        game = self._game
        return game.process.pid if game is not None else None

    def _split_dir(self, name: str) -> Path:
        if name not in self._splits:
            self._splits[name] = split_dir(data_source(self.spec.data_dir), name)
        return self._splits[name]

    def _game_file(self, task: Task) -> Path:
        if task.env != "alfworld":
            raise ValueError(f"task {task.id} belongs to environment '{task.env}', not 'alfworld'")
        return self._split_dir(task.payload["split"]) / task.payload["game"] / GAME_FILE

    # Everything below runs on the worker thread.

    def _reset(self, task: Task) -> StepResult:
        self._task, self._last, self._broken = None, None, False
        path = self._game_file(task)
        # A child that died between episodes is only noticed by the next call: retry once on a fresh one.
        for attempt in range(2):
            try:
                if self._game is None or self._game.process.poll() is not None:
                    self._stop()
                    self._game = _Game()
                    self.process_starts += 1
                answer = self._game.call({"op": "reset", "game": str(path)})
                break
            except _Dead as err:
                failure = self._stop()
                if attempt == 1:
                    raise EnvironmentFault(
                        f"the ALFWorld game process failed to start {task.id}: {err}{failure}"
                    ) from err
        if "error" in answer:
            raise EnvironmentFault(f"ALFWorld could not start {task.id} ({path}): {answer['error']}")
        description, observation = split_intro(answer["observation"])
        self._task = task
        self._last = self._result(answer, observation, description, reward=0.0)
        return self._last

    def _step(self, action: str) -> StepResult:
        task, last = check_step(self._task, self._last, self._broken, "ALFWorld game process")
        command = self._spelling.get(normalize(action))
        if command is None:
            return rejected(last, action)
        assert self._game is not None, "reset() starts the game process"
        try:
            answer = self._game.call({"op": "step", "action": command})
        except _Dead as err:
            self._broken = True
            failure = self._stop()
            raise EnvironmentFault(
                f"the ALFWorld game process died during {task.id}: {err}{failure}"
            ) from err
        if "error" in answer:  # the game raised: its state is unknown, so this episode is over
            self._broken = True
            raise EnvironmentFault(f"ALFWorld failed on '{command}' in {task.id}: {answer['error']}")
        won = answer["won"]
        reward = 1.0 if won and not last.won else 0.0
        self._last = self._result(answer, answer["observation"], last.task_description, reward)
        return self._last

    def _result(
        self, answer: dict[str, Any], observation: str, description: str, reward: float
    ) -> StepResult:
        admissible = tuple(sorted({a for a in answer["admissible"] if a != "help"}))
        self._spelling = spelling(admissible)
        won = bool(answer["won"])
        return StepResult(
            observation=observation.strip(),
            reward=reward,
            done=won,
            won=won,
            score=1.0 if won else 0.0,
            admissible=admissible,
            task_description=description,
        )

    def _stop(self) -> str:
        """Stop the child; returns the tail of its stderr (for error messages), if any."""
        game, self._game = self._game, None
        return game.close() if game is not None else ""


class _Dead(Exception):
    """The child process exited, closed its pipe or stopped answering."""


class _Game:
    """The child process and its pipes; one request, one answer line."""

    def __init__(self):
        for package in ("textworld", "alfworld"):
            if importlib.util.find_spec(package) is None:
                raise PrerequisiteError(f"the ALFWorld environment needs `{package}`: {INSTALL}")
        self.stderr = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            encoding="utf-8",
            # Its own session: Ctrl-C or a SIGTERM to the run's process group must not kill the game
            # under the step in flight (pats finishes that step first); the child exits on its own
            # when the parent closes the pipe or dies.
            start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None  # both PIPE
        self._to, self._from = self.process.stdin, self.process.stdout
        # An env dropped without close() must not leave its process running (~150 MB each).
        self._reaper = weakref.finalize(self, _kill, self.process)
        hello = self._read()
        if "error" in hello:
            self.close()
            raise PrerequisiteError(
                f"the ALFWorld game process could not import its packages ({hello['error']}): {INSTALL}"
            )

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            self._to.write(json.dumps(request) + "\n")
            self._to.flush()
        except OSError as err:  # BrokenPipeError: the child is gone
            raise _Dead(f"could not write to it ({err})") from err
        return self._read()

    def _read(self) -> dict[str, Any]:
        ready, _, _ = select.select([self._from], [], [], CALL_TIMEOUT_S)
        if not ready:
            _kill(self.process)
            raise _Dead(f"no answer within {CALL_TIMEOUT_S:.0f} s, killed it")
        line = self._from.readline()
        if not line:
            self.process.wait(timeout=10)
            raise _Dead(f"it exited with code {self.process.returncode}")
        return json.loads(line)

    def close(self) -> str:
        self._reaper()
        try:
            self.stderr.seek(0)
            lines = [
                ln.strip() for ln in self.stderr.read().decode(errors="replace").splitlines() if ln.strip()
            ]
            self.stderr.close()
        except OSError:
            lines = []
        return f" (stderr: {' | '.join(lines[-5:])})" if lines else ""


@ENVIRONMENTS.register("alfworld")
def make(spec: AlfworldEnvSpec) -> AlfworldEnv:
    return AlfworldEnv(spec)


def split_intro(text: str) -> tuple[str, str]:
    """(task description, observation) from the intro text of a reset."""
    body = text.replace(BANNER, "").strip()
    head, sep, task = body.partition(TASK_PREFIX)
    if not sep:
        return "", body
    return task.strip(), head.strip()


def _kill(process: subprocess.Popen) -> None:
    for pipe in (process.stdin, process.stdout):
        try:
            if pipe is not None:
                pipe.close()  # the child reads EOF and exits on its own
        except OSError:
            pass
    if process.poll() is None:
        process.kill()  # nothing in a game is worth a graceful exit
    process.wait(timeout=10)
