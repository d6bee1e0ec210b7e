"""`pats eval --tasks N` plays N games even past the spec's num_eval_tasks, or refuses with the split's
size: play_heldout on FakeEnv folds of a fixed size, with the scripted policy."""

from __future__ import annotations

import asyncio

import pytest

from pats.engine.evaluate import play_heldout
from pats.errors import PrerequisiteError, SpecError, SpecIssue
from pats.spec import load_spec
from pats.testing import FakeEnv, ScriptedBackend, improving_schedule

FOLD = 10  # games in the fake held-out fold


def play(repo, count: int, refuse_past_fold: bool = False):
    spec = load_spec(repo / "experiments/quickstart.yaml", ["environment.num_eval_tasks=4"])

    def env_factory(s):
        n = s.environment.num_eval_tasks
        if refuse_past_fold and n > FOLD:
            issue = SpecIssue(
                "environment.num_eval_tasks", f"the fold has {FOLD} games; write at most {FOLD}"
            )

            def refuse():
                raise SpecError(issue)

            return lambda: _Lister(refuse)
        return lambda: FakeEnv(num_tasks=min(n, FOLD))

    backend = lambda s, make_env: ScriptedBackend(improving_schedule())  # noqa: E731
    return asyncio.run(
        play_heldout(
            spec, None, "eval", 0, count, 3, lambda line: None, env_factory=env_factory, backend_for=backend
        )
    )


class _Lister(FakeEnv):
    """An environment whose fold is smaller than its spec asks: listing it raises, as TextWorldExpress does."""

    def __init__(self, refuse):
        super().__init__()
        self.refuse = refuse

    def tasks(self, split):
        self.refuse()


def test_more_tasks_than_the_spec_lists_are_played(repo):
    held = play(repo, 6)  # the spec's environment lists 4 held-out games; 6 are asked for
    assert [t.id for t in held.tasks] == [f"fake:eval:{1000 + i}" for i in range(6)]
    assert [r.task_id for r in held.bare] == [t.id for t in held.tasks]


def test_more_tasks_than_the_split_has_are_refused_with_its_size(repo):
    with pytest.raises(
        PrerequisiteError, match="has 10 tasks, fewer than the 12 asked for; ask for at most 10"
    ):
        play(repo, 12)
    with pytest.raises(PrerequisiteError, match="(?s)cannot list 12 eval tasks: .*write at most 10"):
        play(repo, 12, refuse_past_fold=True)
