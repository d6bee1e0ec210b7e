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


@pytest.fixture(autouse=True)
def no_real_backend(monkeypatch):
    """pats' own backend loads the real model: a test that gives play_heldout its backend never builds
    it (were it to, it fails at once instead of loading a model until the mutation run's timeout); the
    tests of `pats eval` without one set their own."""

    def real(spec, make_env):
        raise AssertionError("pats' own backend was built")

    monkeypatch.setattr("pats.engine.evaluate.make_backend", real)


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
    with pytest.raises(PrerequisiteError, match="(?s)^cannot list 12 eval tasks: .*write at most 10"):
        play(repo, 12, refuse_past_fold=True)


def played(run_dir, **kwargs) -> list[str]:
    """The games `pats eval` (evaluate_run) played on `run_dir`'s policy with these arguments."""
    from pats.engine import evaluate

    evaluate.evaluate_run(run_dir, say=lambda line: None, **kwargs)
    record = evaluate.EvalOutcomes.model_validate_json(evaluate.outcomes_path(run_dir, "eval").read_text())
    return sorted(record.outcomes)


def test_eval_first_task_moves_the_runs_evaluations_and_pats_evals_default(repo, tmp_path, monkeypatch):
    """A campaign skips held-out games earlier ones played: the run's own evaluations and `pats eval`
    by default play [first_task, first_task + num_tasks); `pats eval --first` plays others."""
    from pats.engine import evaluate
    from pats.engine.run import run_spec
    from pats.logging.events import EvalEvent, read_events
    from pats.testing.sweep import scripted_trainers

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=1", "eval.first_task=2", "eval.num_tasks=2", "environment.num_eval_tasks=4",
         "eval.gap_tasks=0", "logging.wandb=disabled", "logging.progress=false", f"logging.root={tmp_path}"],
    )  # fmt: skip
    assert spec.eval_tasks() == slice(2, 4)
    run_dir = run_spec(spec, scripted_trainers())
    evals = read_events(run_dir / "events.jsonl", EvalEvent)
    assert evals and all(sorted(e.outcomes) == ["fake:eval:1002", "fake:eval:1003"] for e in evals)

    monkeypatch.setattr(evaluate, "make_env_factory", lambda s: lambda: FakeEnv(num_tasks=FOLD))
    monkeypatch.setattr(evaluate, "make_backend", lambda s, make_env: ScriptedBackend(improving_schedule()))

    assert played(run_dir) == ["fake:eval:1002", "fake:eval:1003"]
    assert played(run_dir, first_task=5, num_tasks=3) == [f"fake:eval:{1000 + i}" for i in (5, 6, 7)]


def test_eval_first_task_past_the_listed_tasks_is_refused_with_the_size_to_write(repo):
    with pytest.raises(SpecError, match="set environment.num_eval_tasks to at least 192"):
        load_spec(
            repo / "experiments/quickstart.yaml",
            ["eval.first_task=160", "eval.num_tasks=32", "environment.num_eval_tasks=128"],
        )
    spec = load_spec(
        repo / "experiments/quickstart.yaml", ["eval.first_task=160", "environment.num_eval_tasks=192"]
    )
    assert spec.eval_tasks() == slice(160, 192)  # num_tasks unset: the rest of the listed tasks


def test_eval_first_task_plays_the_games_asked_for_where_the_environment_lists_only_num_eval_tasks(
    repo, tmp_path, monkeypatch
):
    """TextWorldExpress lists exactly environment.num_eval_tasks games: `pats eval` past them grows the
    listing to first_task + tasks, so the games asked for are played, not fewer or others."""
    from pats.engine import evaluate
    from pats.engine.run import run_spec
    from pats.testing.sweep import scripted_trainers

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=1", "eval.first_task=2", "eval.num_tasks=2", "environment.num_eval_tasks=4",
         "eval.gap_tasks=0", "logging.wandb=disabled", "logging.progress=false", f"logging.root={tmp_path}"],
    )  # fmt: skip
    run_dir = run_spec(spec, scripted_trainers())
    listed: list[int] = []

    def exact(s):
        listed.append(s.environment.num_eval_tasks)
        return lambda: FakeEnv(num_tasks=s.environment.num_eval_tasks)

    monkeypatch.setattr(evaluate, "make_env_factory", exact)
    monkeypatch.setattr(evaluate, "make_backend", lambda s, make_env: ScriptedBackend(improving_schedule()))

    assert played(run_dir) == ["fake:eval:1002", "fake:eval:1003"] and listed == [4]
    assert played(run_dir, num_tasks=4) == [f"fake:eval:{1000 + i}" for i in range(2, 6)] and listed[-1] == 6
    assert played(run_dir, first_task=5, num_tasks=3) == [f"fake:eval:{1000 + i}" for i in (5, 6, 7)]
    assert listed[-1] == 8


@pytest.fixture(scope="module")
def trained(repo, tmp_path_factory):
    """A two-step run of the quickstart (the full loop) by the scripted policy: a checkpoint and a scaffold."""
    from pats.engine.run import run_spec
    from pats.testing.sweep import scripted_trainers

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=2", "eval.first_task=2", "eval.num_tasks=2", "environment.num_eval_tasks=4",
         "environment.num_train_tasks=4", "eval.gap_tasks=0", "logging.wandb=disabled",
         "logging.progress=false", f"logging.root={tmp_path_factory.mktemp('runs')}"],
    )  # fmt: skip
    return run_spec(spec, scripted_trainers())


class _SpecFolds(FakeEnv):
    """FakeEnv listing each split as large as the spec says (num_train_tasks, num_eval_tasks)."""

    def __init__(self, spec):
        super().__init__()
        self.sizes = {"train": spec.environment.num_train_tasks, "eval": spec.environment.num_eval_tasks}

    def tasks(self, split):
        self.num_tasks = self.sizes[split]
        return super().tasks(split)


@pytest.fixture
def fake_eval(monkeypatch):
    """`pats eval` on FakeEnv folds as large as the spec lists (each split) and the scripted policy."""
    from pats.engine import evaluate

    monkeypatch.setattr(evaluate, "make_env_factory", lambda s: lambda: _SpecFolds(s))
    monkeypatch.setattr(evaluate, "make_backend", lambda s, make_env: ScriptedBackend(improving_schedule()))


def test_pats_eval_says_what_it_plays_and_writes_each_modes_metrics_and_outcomes(trained, fake_eval):
    """The lines `pats eval` prints, its metrics file (the returned metrics) and its outcomes by game,
    without the scaffold and, asked for, with the run's own scaffold (whose text lengthens the prompts)."""
    import json

    from pats.engine import evaluate

    lines: list[str] = []
    metrics = evaluate.evaluate_run(trained, with_scaffold=True, say=lines.append)
    assert lines[0] == "evaluating the checkpoint after step 1 on 2 eval tasks"
    assert [line.split(":")[0] for line in lines[1:]] == ["eval no scaffold", "eval with scaffold"]
    assert metrics["eval/tasks"] == 2.0 and metrics["eval/checkpoint_step"] == 1.0
    assert metrics["eval_with_scaffold/prompt_tokens"] > metrics["eval/prompt_tokens"]  # the run's scaffold
    assert {"eval/success", "eval_with_scaffold/success"} <= metrics.keys()
    assert json.loads(evaluate.eval_path(trained, "eval").read_text()) == metrics
    record = evaluate.EvalOutcomes.model_validate_json(evaluate.outcomes_path(trained, "eval").read_text())
    games = ["fake:eval:1002", "fake:eval:1003"]
    assert record.checkpoint_step == 1 and record.split == "eval"
    assert sorted(record.outcomes) == games and sorted(record.outcomes_with_scaffold) == games

    # without --with-scaffold: the with-scaffold results of this checkpoint stay (issue 59, item 3)
    with_scaffold = {k: v for k, v in metrics.items() if k.startswith("eval_with_scaffold")}
    bare = evaluate.evaluate_run(trained, say=lines.append)
    assert {k: v for k, v in bare.items() if k.startswith("eval_with_scaffold")} == with_scaffold
    played = {k for k in bare if not k.startswith("eval_with_scaffold")}
    assert played == metrics.keys() - with_scaffold.keys()  # and this evaluation's own, all of them
    assert json.loads(evaluate.eval_path(trained, "eval").read_text()) == bare
    again = evaluate.EvalOutcomes.model_validate_json(evaluate.outcomes_path(trained, "eval").read_text())
    assert again.outcomes_with_scaffold == record.outcomes_with_scaffold and sorted(again.outcomes) == games


def test_pats_eval_of_the_train_split_plays_its_first_games_past_num_train_tasks(trained, fake_eval):
    """On the train split `pats eval` starts at game 0 (not at eval.first_task) and lists the train
    fold as large as asked, past the spec's num_train_tasks (4)."""
    from pats.engine import evaluate

    evaluate.evaluate_run(trained, split="train", num_tasks=6, say=lambda line: None)
    record = evaluate.EvalOutcomes.model_validate_json(evaluate.outcomes_path(trained, "train").read_text())
    assert sorted(record.outcomes, key=lambda t: int(t.split(":")[2])) == [
        f"fake:train:{i}" for i in range(6)
    ]


def test_the_untrained_policy_and_a_run_without_a_checkpoint_are_named(repo, tmp_path):
    from pats.engine import evaluate
    from pats.spec import spec_to_yaml

    lines: list[str] = []
    spec = load_spec(repo / "experiments/quickstart.yaml", ["environment.num_eval_tasks=4"])
    held = asyncio.run(
        play_heldout(spec, None, "eval", 0, 2, 3, lines.append, env_factory=lambda s: lambda: FakeEnv(),
                     backend_for=lambda s, make_env: ScriptedBackend(improving_schedule()))
    )  # fmt: skip
    assert lines[0] == "evaluating the untrained policy on 2 eval tasks"
    assert held.scaffolded is None and len(held.bare) == 2  # no scaffold asked (one episode a game here)
    (tmp_path / "spec.yaml").write_text(spec_to_yaml(spec))
    with pytest.raises(PrerequisiteError, match=f"^{tmp_path} has no checkpoint yet; train first"):
        evaluate.evaluate_run(tmp_path, say=lambda line: None)


def test_a_runs_evaluations_play_as_many_episodes_at_once_as_a_training_step(repo, tmp_path):
    """The local backend holds an environment (a JVM for TextWorldExpress) per episode in flight: a
    run's evaluation of 64 games x 4 episodes once played all 256 at once and held 256 JVMs (~14 GB)
    for the rest of the run, and two Stage 1 cells evaluating side by side were killed for memory.
    Evaluations now play eval_batch() games at a time: tasks_per_step x group_size episodes."""
    from pats.engine.run import train

    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        ["trainer.steps=1", "trainer.tasks_per_step=2", "trainer.group_size=4", "eval.samples_per_task=4",
         "eval.num_tasks=7", "environment.num_eval_tasks=7", "eval.gap_tasks=0", "eval.pool=true",
         "environment.num_train_tasks=4", "logging.wandb=disabled", "logging.progress=false",
         f"logging.root={tmp_path}"],
    )  # fmt: skip
    assert spec.eval_batch() == 2  # 2 tasks x 4 episodes a step = 8 episodes = 2 games x 4 episodes
    calls: list[list[str]] = []

    class Recording(ScriptedBackend):
        async def evaluate(self, tasks, views):
            calls.append([t.id for t in tasks])
            return await super().evaluate(tasks, views)

    run_dir = tmp_path / spec.name
    asyncio.run(
        train(spec, run_dir, None, env_factory=lambda s: lambda: FakeEnv(num_tasks=7),
              backend_for=lambda s, make_env: Recording(improving_schedule()),
              count_tokens=lambda text: len(text.split()))
    )  # fmt: skip
    assert calls and max(len(c) for c in calls) == 2
    held_out = [f"fake:eval:{1000 + i}" for i in range(7)]
    played = [t for c in calls for t in c if t.startswith("fake:eval")]
    assert played[:7] == held_out  # the evaluation before training, in order, every game once
    assert [t for c in calls for t in c if t.startswith("fake:train")]  # the pool too (eval.pool), batched


def test_eval_batch_is_whole_games_and_at_least_one(repo):
    def batch(*overrides: str) -> int:
        return load_spec(repo / "experiments/quickstart.yaml", list(overrides)).eval_batch()

    assert batch("trainer.tasks_per_step=4", "trainer.group_size=8", "eval.samples_per_task=4") == 8
    assert batch("trainer.tasks_per_step=3", "trainer.group_size=5", "eval.samples_per_task=4") == 3
    assert (
        batch(
            "trainer.tasks_per_step=1",
            "trainer.group_size=2",
            "eval.samples_per_task=4",
            "scaffold.mode=none",
        )
        == 1
    )
