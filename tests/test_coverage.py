"""Guidance coverage in every run's metrics (issue 58, item 5): each rollout group counted by what its
pinned view showed (a plan of its task, other guidance, nothing), with the informative fraction and the
train success with and without the scaffold of each class, and the plan steps shown."""

from __future__ import annotations

import pytest

from pats.engine.run import run_spec
from pats.logging.events import StepEndEvent, read_events
from pats.metrics import group_metrics
from pats.review import ScaffoldPolicy
from pats.scaffold import ScaffoldStore
from pats.spec import load_spec
from pats.testing.sweep import scripted_trainers
from pats.types import AddEdit, Rollout, RolloutGroup, Task


def words(text: str) -> int:
    return len(text.split())


def task(i: int, kind: str = "twc") -> Task:
    return Task(id=f"t{i}", type=kind, split="train", env="fake")


def group(t: Task, version: str, scaffolded: list[bool], probes: list[bool]) -> RolloutGroup:
    """A group of `t` pinned to `version`: its scaffolded rollouts' and its probes' successes."""
    rollouts = [
        Rollout(id=f"{t.id}-{i}", task_id=t.id, scaffolded=s, scaffold_version=version if s else "",
                turns=(), reward=float(won), success=won)
        for i, (s, won) in enumerate([*((False, w) for w in probes), *((True, w) for w in scaffolded)])
    ]  # fmt: skip
    return RolloutGroup(step=0, task=t, scaffold_version=version, rollouts=tuple(rollouts))


def store_with(*adds: AddEdit, view_tokens: int = 1000) -> ScaffoldStore:
    store = ScaffoldStore(words, view_tokens)
    store.seed(list(adds))
    return store


PLAN = AddEdit(kind="plan", scope="task:t0", text="Steps to try: open fridge -> take milk -> put milk in box")
SKILL = AddEdit(kind="skill", scope="type:twc", text="Put things where they belong.")


def test_each_group_is_counted_by_what_its_pinned_view_showed():
    """t0 sees its plan (and the type skill), t1 the type skill only, t2 (another type) nothing; each
    class gets its informative fraction and its success with the scaffold and of its probes."""
    policy = ScaffoldPolicy("static", store_with(PLAN, SKILL))
    t0, t1, t2 = task(0), task(1), task(2, kind="other")
    views = [policy.view(t) for t in (t0, t1, t2)]
    assert views[2].version == ""  # nothing applies to t2: the empty view
    groups = [
        group(t0, views[0].version, [True, True, False], [False]),  # informative; with 2/3, probes 0/1
        group(t1, views[1].version, [False, False, False], [False]),  # not informative
        group(t2, views[2].version, [True, False, False], [True]),  # informative
    ]
    metrics = group_metrics(groups, policy.view_entries)
    coverage = {k: v for k, v in metrics.items() if k.startswith("coverage/")}
    assert coverage == pytest.approx({
        "coverage/plan_groups": 1.0, "coverage/plan_fraction": 1 / 3,
        "coverage/plan_informative_fraction": 1.0,
        "coverage/plan_success_with_scaffold": 2 / 3, "coverage/plan_success_without_scaffold": 0.0,
        "coverage/other_groups": 1.0, "coverage/other_fraction": 1 / 3,
        "coverage/other_informative_fraction": 0.0,
        "coverage/other_success_with_scaffold": 0.0, "coverage/other_success_without_scaffold": 0.0,
        "coverage/none_groups": 1.0, "coverage/none_fraction": 1 / 3,
        "coverage/none_informative_fraction": 1.0,
        "coverage/none_success_with_scaffold": 1 / 3, "coverage/none_success_without_scaffold": 1.0,
        "coverage/plan_steps": 3.0, "coverage/plan_cut_groups": 0.0,
    })  # fmt: skip


def test_a_class_without_groups_or_probes_has_no_rates_and_a_cut_plan_is_counted():
    """Only plans shown here, without probes: the other classes count 0 groups and have no rates (not
    a 0.0 that was never measured), nor has any class a probe success; a plan ending in '...' was cut,
    and one that is not a list of steps counts as one step."""
    cut = AddEdit(kind="plan", scope="task:t0", text="Steps to try: open fridge -> take milk -> ...")
    prose = AddEdit(kind="plan", scope="task:t1", text="Put the milk in the box.")
    policy = ScaffoldPolicy("static", store_with(cut, prose))
    t0, t1 = task(0), task(1)
    groups = [group(t, policy.view(t).version, [True, False], []) for t in (t0, t1)]
    metrics = group_metrics(groups, policy.view_entries)
    assert (metrics["coverage/plan_fraction"], metrics["coverage/other_groups"]) == (1.0, 0.0)
    assert metrics["coverage/plan_steps"] == 1.5  # (2 + 1) / 2
    assert metrics["coverage/plan_cut_groups"] == 1.0
    assert "coverage/other_informative_fraction" not in metrics
    assert not [k for k in metrics if k.endswith("_success_without_scaffold")]


def test_a_plan_the_view_budget_left_out_was_not_shown():
    """The store holds t0's plan, but the view's token budget leaves room for the type skill only: the
    group was shown other guidance, not a plan."""
    store = store_with(PLAN, SKILL, view_tokens=20)
    policy = ScaffoldPolicy("static", store)
    view = policy.view(task(0))
    assert "Steps to try" not in view.text and "Put things" in view.text
    metrics = group_metrics([group(task(0), view.version, [True], [])], policy.view_entries)
    assert (metrics["coverage/plan_groups"], metrics["coverage/other_groups"]) == (0.0, 1.0)
    assert "coverage/plan_steps" not in metrics


def test_a_later_version_does_not_change_what_an_earlier_group_was_shown():
    """The metrics are computed at the step's end, after its review committed a new version: a group
    counts the version it was pinned, not the store's current one."""
    store = store_with(SKILL)
    policy = ScaffoldPolicy("static", store)
    pinned = policy.view(task(0)).version
    store.apply([PLAN], step=0)  # the review's edit: t0's plan from the next step on
    metrics = group_metrics([group(task(0), pinned, [True], [])], policy.view_entries)
    assert (metrics["coverage/plan_groups"], metrics["coverage/other_groups"]) == (0.0, 1.0)
    later = group(task(0), policy.view(task(0)).version, [True], [])
    assert group_metrics([later], policy.view_entries)["coverage/plan_groups"] == 1.0


@pytest.mark.parametrize("mode", ["none", "pats"])
def test_every_step_of_a_run_logs_its_coverage(mode, repo, tmp_path):
    """A run's step ends carry the coverage, the classes' shares summing to 1; a run without a scaffold
    shows every group nothing."""
    spec = load_spec(
        repo / "experiments/quickstart.yaml",
        [f"scaffold.mode={mode}", "trainer.steps=4", "eval.at_start=false", "eval.every=10",
         "eval.gap_tasks=0", "logging.wandb=disabled", "logging.progress=false", f"logging.root={tmp_path}"],
    )  # fmt: skip
    run_dir = run_spec(spec, scripted_trainers())
    ends = [e.metrics for e in read_events(run_dir / "events.jsonl", StepEndEvent)]
    assert len(ends) == 4
    for m in ends:
        shares = [m[f"coverage/{c}_fraction"] for c in ("plan", "other", "none")]
        assert sum(shares) == pytest.approx(1.0)
        groups = sum(m[f"coverage/{c}_groups"] for c in ("plan", "other", "none"))
        assert groups == m["train/groups"]
    if mode == "none":
        assert all(m["coverage/none_fraction"] == 1.0 for m in ends)
    else:  # the rules reviser writes plans of the tasks won: some later group is shown one
        assert any(m["coverage/plan_groups"] > 0 for m in ends[1:])
