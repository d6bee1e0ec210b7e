"""Search-augmented QA with the Search-R1 protocol behind the `Env` protocol.

An episode is one question. The policy's whole output is the action (`parses_output = True`): the first
`<search>query</search>` is answered with `<information>Doc 1(Title: ...) ...</information>` (the
retriever's top-k passages), the first `<answer>...</answer>` ends the episode with exact match against
the golden answers as reward (or token F1 with `reward: f1`); `won` is exact match and `score` is F1
whichever reward is used. Anything else is an invalid step with a reason, answered with Search-R1's
"My previous action is invalid..." observation, and the episode goes on. `max_turns` is the backend's.

Searches run off the event loop, on the default executor. A retriever that keeps failing (after the
HTTP client's retries) raises `EnvironmentFault` with the cause; the episode cannot continue.

Tasks: `tasks('train')` lists the questions of `train_data`, `tasks('eval')` those of `eval_data`, in
a fixed pseudo-random order (by a hash of the task id, so the same on every machine and unchanged when
files are added), capped at num_train_tasks / num_eval_tasks. Task ids are
"search_qa:<split>:<dataset>:<file stem>:<row>"; the task type is the dataset (nq, hotpotqa, ...).

`expert_plan` is the scripted searcher's plan: search the question, answer the first golden answer.
It is an answer key, not a demonstration that retrieval finds the answer: privileged cards only.
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path

from pats.envs.search_qa.answers import exact_match, f1
from pats.envs.search_qa.data import load_questions
from pats.envs.search_qa.protocol import INVALID_OBSERVATION, information, parse_output
from pats.envs.search_qa.retrievers import Bm25Retriever, HttpRetriever, RetrieverError, make_retriever
from pats.errors import EnvironmentFault, PrerequisiteError
from pats.protocols import StepResult
from pats.registry import ENVIRONMENTS
from pats.spec.environments import SearchQaEnvSpec
from pats.types import Task


class SearchQaEnv:
    """One question at a time; the policy searches and answers in Search-R1's tags."""

    parses_output = True  # step() receives the policy's whole output

    def __init__(self, spec: SearchQaEnvSpec):
        self.spec = spec
        self._retriever: Bm25Retriever | HttpRetriever | None = None  # built on the first search
        self._task: Task | None = None
        self._last: StepResult | None = None
        self.searches: list[str] = []  # queries of the episode in progress

    def tasks(self, split: str) -> list[Task]:
        if split == "train":
            files, count, field = self.spec.train_data, self.spec.num_train_tasks, "train_data"
        elif split == "eval":
            files, count, field = self.spec.eval_data, self.spec.num_eval_tasks, "eval_data"
        else:
            raise ValueError(f"unknown split '{split}'; known: train, eval")
        tasks: dict[str, Task] = {}
        for file in files:
            stem = Path(file).stem
            for q in load_questions(file):
                task_id = f"search_qa:{split}:{q.dataset}:{stem}:{q.row}"
                if task_id in tasks:
                    raise PrerequisiteError(
                        f"environment.{field}: two files named '{stem}' hold {q.dataset} questions, so "
                        f"their task ids collide ({task_id}); list each file once, or rename one"
                    )
                payload = {"question": q.question, "answers": list(q.answers), "dataset": q.dataset}
                tasks[task_id] = Task(
                    id=task_id, type=q.dataset, split=split, env="search_qa", payload=payload
                )
        order = sorted(tasks, key=lambda task_id: hashlib.sha256(task_id.encode()).hexdigest())
        return [tasks[task_id] for task_id in order[:count]]

    async def reset(self, task: Task) -> StepResult:
        if task.env != "search_qa":
            raise ValueError(f"task {task.id} belongs to environment '{task.env}', not 'search_qa'")
        question = task.payload["question"]
        self._task, self.searches = task, []
        self._last = StepResult(observation=f"Question: {question}", task_description=question)
        return self._last

    async def step(self, action: str) -> StepResult:
        if self._task is None or self._last is None:
            raise RuntimeError("step() called before reset()")
        if self._last.done:
            raise RuntimeError(f"step() called after the episode of {self._task.id} ended; call reset()")
        parsed = parse_output(action)
        base = {"task_description": self._last.task_description}
        if parsed.kind is None:
            return StepResult(
                observation=INVALID_OBSERVATION, valid=False, invalid_reason=parsed.reason, **base
            )
        if parsed.kind == "search":
            passages = await asyncio.get_running_loop().run_in_executor(None, self._search, parsed.content)
            self.searches.append(parsed.content)
            self._last = StepResult(observation=information(passages), **base)
            return self._last
        golden = self._task.payload["answers"]
        won, score = exact_match(parsed.content, golden), f1(parsed.content, golden)
        reward = float(won) if self.spec.reward == "em" else score
        self._last = StepResult(observation="", reward=reward, done=True, won=won, score=score, **base)
        return self._last

    def expert_plan(self, task: Task) -> list[str] | None:
        return [
            f"<search>{task.payload['question']}</search>",
            f"<answer>{task.payload['answers'][0]}</answer>",
        ]

    async def close(self) -> None:
        self._task = self._last = None

    def _search(self, query: str):
        try:
            if self._retriever is None:
                self._retriever = make_retriever(self.spec.retriever)
            return self._retriever.search(query)
        except RetrieverError as err:
            raise EnvironmentFault(
                f"search for {self._task.id if self._task else 'a task'} failed: {err}"
            ) from err


@ENVIRONMENTS.register("search_qa")
def make(spec: SearchQaEnvSpec) -> SearchQaEnv:
    return SearchQaEnv(spec)
