"""Progress where stdout/stderr is not a terminal (nohup, CI, a scheduler): plain lines, one per step
and one per evaluation, naming the checkpoint an evaluation measured (issue 25)."""

from __future__ import annotations

import io

from rich.console import Console

from pats.cli.main import main
from pats.engine import run as run_module
from pats.engine.progress import ProgressSink
from pats.spec.models import ExperimentSpec
from pats.testing import FakeEnv, ScriptedBackend, improving_schedule

STEP = {
    "train/success": 0.5,
    "train_with_scaffold/success": 0.75,
    "train_without_scaffold/success": 0.0,
    "train/informative_groups": 2.0,
    "train/groups": 3.0,
    "train/informative_fraction": 2 / 3,
    "scaffold/entries": 4.0,
    "scaffold/tokens": 120.0,
    "time/step_s": 81.4,
}


def test_each_step_and_evaluation_is_one_plain_line():
    out = io.StringIO()
    spec = ExperimentSpec.model_validate(
        {"name": "demo", "environment": {"kind": "twx"}, "trainer": {"steps": 2}}
    )
    sink = ProgressSink(spec, console=Console(file=out, force_terminal=False, width=80))
    sink.log(0, {"eval/success": 0.25})  # the evaluation before training
    sink.log(0, STEP)
    sink.log(1, STEP)
    sink.log(1, {"eval/success": 0.5, "eval_with_scaffold/success": 0.625})
    sink.close()
    lines = out.getvalue().splitlines()
    assert lines == [
        "[demo] training steps 0-1 of 2; first the evaluation before training (eval.at_start)",
        "[demo] eval of the checkpoint before training: held-out success 25% (no scaffold)",
        "[demo] step 0 (1/2): success 75% with / 0% without scaffold | informative 2/3 groups | "
        "scaffold 4 entries, 120 tok | 81 s",
        "[demo] step 1 (2/2): success 75% with / 0% without scaffold | informative 2/3 groups | "
        "scaffold 4 entries, 120 tok | 81 s",
        "[demo] eval of the checkpoint after step 1: held-out success 50% (no scaffold), with scaffold 62%",
    ], "one line each, never wrapped at the console width"


def test_the_first_line_names_what_runs_first():
    """The evaluation before training runs before step 0 and can take longer than a step (a tiny
    sweep's cells said "step 0: rolling out" for minutes while they evaluated)."""

    def first_line(at_start: bool, start: int = 0) -> str:
        out = io.StringIO()
        spec = ExperimentSpec.model_validate(
            {
                "name": "demo",
                "environment": {"kind": "twx"},
                "trainer": {"steps": 2},
                "eval": {"at_start": at_start},
            }
        )
        ProgressSink(spec, start=start, console=Console(file=out, force_terminal=False)).close()
        return out.getvalue()

    assert (
        first_line(True)
        == "[demo] training steps 0-1 of 2; first the evaluation before training (eval.at_start)\n"
    )
    assert first_line(False) == "[demo] training steps 0-1 of 2; step 0: rolling out\n"
    assert first_line(True, start=1) == "[demo] training steps 1-1 of 2; step 1: rolling out\n", (
        "a resumed run"
    )


def test_the_live_bar_says_the_evaluation_runs_then_step_0():
    spec = ExperimentSpec.model_validate(
        {"name": "demo", "environment": {"kind": "twx"}, "trainer": {"steps": 2}}
    )
    sink = ProgressSink(spec, console=Console(file=io.StringIO(), force_terminal=True, width=120))
    info = lambda: sink.progress.tasks[0].fields["info"]  # noqa: E731
    assert info() == "first the evaluation before training (eval.at_start)"
    sink.log(0, {"eval/success": 0.25})
    assert info() == "step 0: rolling out"
    sink.log(0, STEP)
    sink.log(0, {"eval/success": 0.5})
    assert info().startswith("success 75% with"), "a later evaluation leaves the step's numbers"
    sink.close()


def test_a_finished_run_does_not_announce_a_first_step():
    out = io.StringIO()
    spec = ExperimentSpec.model_validate(
        {"name": "demo", "environment": {"kind": "twx"}, "trainer": {"steps": 2}}
    )
    ProgressSink(spec, start=2, console=Console(file=out, force_terminal=False)).close()
    assert out.getvalue() == "[demo] all 2 steps done; nothing left to train\n"


def test_pats_run_outside_a_terminal_prints_a_line_per_step(tmp_path, monkeypatch, write, capsys):
    monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))

    monkeypatch.setattr(
        run_module, "make_backend", lambda spec, env: ScriptedBackend(improving_schedule(), seed=3)
    )
    spec = write(
        "progress.yaml",
        f"""name: progress
environment: {{kind: twx}}
trainer: {{steps: 3, tasks_per_step: 2, group_size: 4, checkpoint_every: 10}}
eval: {{every: 3, at_start: false, num_tasks: 2}}
logging: {{root: "{tmp_path}", wandb: disabled}}
""",
    )
    assert main(["run", str(spec)]) == 0
    err = capsys.readouterr().err.splitlines()
    steps = [line for line in err if line.startswith("[progress] step ")]
    assert [line.split(":")[0] for line in steps] == [
        "[progress] step 0 (1/3)",
        "[progress] step 1 (2/3)",
        "[progress] step 2 (3/3)",
    ]
    assert all("success" in s and "informative" in s and "entries" in s and " s" in s for s in steps)
    assert any(line.startswith("[progress] eval of the checkpoint after step 2:") for line in err)
