"""`pats report` plots what the run logged, where it logged it, readably (issue 25).

A short `pats run` (scripted backend on FakeEnv tasks, evaluations before training and after steps 1
and 3) and its report: the data behind every plot (`report/plots.json`) equals `metrics.jsonl`, the
matplotlib artists draw exactly that data, ticks are whole steps, every axis says what it shows, no
two series of a panel sit on the same points, and an evaluation sits at the step whose checkpoint it
measured, as in `metrics.jsonl` (W&B's steps) and summary.md.
"""

from __future__ import annotations

import json

import matplotlib
import pytest

from pats.cli.main import main
from pats.engine import run as run_module
from pats.report import START, draw
from pats.testing import FakeEnv, ScriptedBackend, improving_schedule

matplotlib.use("Agg")

SPEC = """\
name: report
environment: {{kind: twx}}
scaffold: {{mode: pats, probe_fraction: 0.25}}
trainer: {{steps: 4, tasks_per_step: 2, group_size: 4, checkpoint_every: 10}}
eval: {{every: 2, at_start: true, with_scaffold: true, num_tasks: 2}}
logging: {{root: "{root}", wandb: disabled, progress: false}}
"""


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """(run folder, plots.json) of a 4-step run and its report."""
    root = tmp_path_factory.mktemp("report")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))
        mp.setattr(
            run_module, "make_backend", lambda spec, make_env: ScriptedBackend(improving_schedule(), seed=3)
        )
        spec = root / "report.yaml"
        spec.write_text(SPEC.format(root=root))
        assert main(["run", str(spec)]) == 0
    run_dir = root / "report"
    assert main(["report", str(run_dir)]) == 0
    return run_dir, json.loads((run_dir / "report" / "plots.json").read_text())


def logged(run_dir, key):
    """(step, value) of every metrics.jsonl line with `key`, in order."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(row["step"], row[key]) for row in rows if key in row]


def test_every_plotted_point_is_a_logged_metric_at_its_step(reported):
    run_dir, plots = reported
    assert set(plots) == {
        "success.png", "scaffold.png", "edits.png", "prompt_tokens.png", "informative.png", "coverage.png"
    }  # fmt: skip
    for name, plot in plots.items():
        assert (run_dir / "report" / name).stat().st_size > 0
        for panel in plot["panels"]:
            for s in panel["series"]:
                # W&B and metrics.jsonl log the evaluation before training at step 0.
                points = [(max(x, 0), y) for x, y in zip(s["x"], s["y"], strict=True)]
                assert points == logged(run_dir, s["key"]), (name, s["key"])


def test_evaluations_sit_at_the_step_whose_checkpoint_they_measured(reported):
    run_dir, plots = reported
    (panel,) = plots["success.png"]["panels"]
    held_out = next(s for s in panel["series"] if s["key"] == "eval/success")
    assert held_out["x"] == [START, 1, 3], "at start, then after steps 1 and 3 (of 0-3)"
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "| start (before step 0) |" in summary and "| after step 3 |" in summary
    assert "after step 4" not in summary


def test_prompt_tokens_start_at_step_0(reported):
    _, plots = reported
    (panel,) = plots["prompt_tokens.png"]["panels"]
    assert min(min(s["x"]) for s in panel["series"]) == 0


def test_entries_and_tokens_have_separate_axes(reported):
    _, plots = reported
    panels = plots["scaffold.png"]["panels"]
    assert [[s["key"] for s in p["series"]] for p in panels] == [["scaffold/entries"], ["scaffold/tokens"]]


def test_the_artists_draw_the_data_readably(reported):
    _, plots = reported
    for name, plot in plots.items():
        fig = draw(plot)
        panels = [p for p in plot["panels"] if p["series"]]
        assert len(fig.axes) == len(panels), name
        for ax, panel in zip(fig.axes, panels, strict=True):
            assert ax.get_ylabel() == panel["ylabel"] and "(" in ax.get_ylabel(), "a unit in brackets"
            if panel["bars"]:
                drawn = [[(p.get_x() + p.get_width() / 2, p.get_height()) for p in c] for c in ax.containers]
                tops = [list(zip(line.get_xdata(), line.get_ydata(), strict=True)) for line in ax.get_lines()]
                assert tops == drawn, "a marker on every bar, so a bar of height 0 still shows"
            else:
                drawn = [
                    list(zip(line.get_xdata(), line.get_ydata(), strict=True)) for line in ax.get_lines()
                ]
            assert len(drawn) == len(panel["series"]), name
            for points, s in zip(drawn, panel["series"], strict=True):
                expected = [v for x, y in zip(s["x"], s["y"], strict=True) for v in (x + s["offset"], y)]
                assert [float(v) for p in points for v in p] == pytest.approx(expected), (name, s["key"])
            # No two series of a panel share a drawn point (a 0.0 success hides nothing).
            every = [(round(x, 6), y) for points in drawn for x, y in points]
            assert len(every) == len(set(every)), (name, "series drawn on top of each other")
        bottom = fig.axes[-1]
        assert "training step" in bottom.get_xlabel()
        ticks = list(bottom.get_xticks())
        assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)
        labels = [t.get_text() for t in bottom.get_xticklabels()]
        assert labels == ["start" if t == START else str(int(t)) for t in ticks], (name, labels)
        matplotlib.pyplot.close(fig)


def test_the_guidance_coverage_is_plotted_and_tabled(reported):
    """What each group was shown (issue 58, item 5): the classes' shares, their informative fractions,
    success with the scaffold and of the probes, and the plan steps, drawn from metrics.jsonl; the
    summary tables their means over the steps."""
    run_dir, plots = reported
    panels = plots["coverage.png"]["panels"]
    keys = [[s["key"] for s in p["series"]] for p in panels]
    assert keys[0] == ["coverage/plan_fraction", "coverage/other_fraction", "coverage/none_fraction"]
    assert "coverage/plan_informative_fraction" in keys[1] and keys[3] == ["coverage/plan_steps"]
    assert "coverage/plan_success_without_scaffold" in keys[2]
    shares = [sum(s["y"][i] for s in panels[0]["series"]) for i in range(4)]
    assert shares == pytest.approx([1.0] * 4)  # every group of each of the 4 steps in one class
    summary = (run_dir / "report" / "summary.md").read_text()
    fractions = [m for _, m in logged(run_dir, "coverage/plan_fraction")]
    assert f"| shown a plan | {sum(fractions) / len(fractions):.3f} |" in summary
    assert (
        "| groups | share of groups | informative | train success with scaffold | probes without |" in summary
    )
    assert "Plan steps shown per group shown a plan: " in summary
