"""verl's scaffold service, in-process (no Ray, no model): its steps end through the local engine's
step end, so a review that raises is logged and training goes on (k in a row stop the run at the
next pin), and a service restarted beside a resumed verl job serves the scaffold and judge state of
verl's checkpoint step, not the ones its run directory reached later."""

from __future__ import annotations

import json

import pytest

from pats.backends.verl.service import TRACKER, ScaffoldService
from pats.errors import PrerequisiteError, TrainingError
from pats.logging.events import ReviewFailedEvent, StepEndEvent, read_events
from pats.types import Rollout, Task, Turn

pytestmark = pytest.mark.slow  # a TextWorldExpress JVM per service


def write_spec(tmp_path, scaffold: str = "{probe_fraction: 0.5}") -> str:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: verl-resume\n"
        "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},\n"
        "  num_train_tasks: 2, num_eval_tasks: 1, max_turns: 4}\n"
        "policy: {max_new_tokens: 16}\n"
        f"scaffold: {scaffold}\n"
        "trainer: {backend: verl, max_response_tokens: 1024, tasks_per_step: 1, group_size: 4, gpus_per_node: 1}\n"
        f"logging: {{root: {tmp_path / 'runs'}, wandb: disabled}}\n"
    )
    return str(spec)


# A won rollout's path moves the game (the rules reviser writes it as a plan; one that only looks around
# has no plan, pats.scaffold.plans.plan_of, and its review would leave the scaffold empty).
WON_PATH = ("take red apple", "put red apple in fridge")


def rollout(rid: str, task: Task, won: bool, version: str, scaffolded: bool) -> str:
    actions = WON_PATH if won else ("look around",)
    turns = tuple(Turn(observation="o", action=a, output=a, reward=0.0) for a in actions)
    turns = (*turns[:-1], turns[-1].model_copy(update={"reward": float(won)}))
    return Rollout(
        id=rid, task_id=task.id, scaffolded=scaffolded, scaffold_version=version, turns=turns,
        reward=float(won), success=won, truncated=not won,
    ).model_dump_json()  # fmt: skip


async def play(service: ScaffoldService, step: int, wins: int) -> None:
    """One verl step (global step step + 1): a group of four rollouts of one task, `wins` of them won."""
    from pats.engine.run import make_env_factory

    task = make_env_factory(service.spec)().tasks("train")[0]
    uid = f"g{step}"
    for i in range(4):
        pinned = await service.pin(uid, task.model_dump_json(), step + 1)
        report = rollout(f"{uid}-{i}", task, i < wins, pinned.view.version, pinned.scaffolded)
        await service.report(uid, report)
    await service.wait_reviews()


def raising_judge(monkeypatch, at) -> None:
    import pats.build
    from pats.judges import StatsJudge
    from pats.testing import RaisingJudge

    monkeypatch.setattr(
        pats.build, "build_judge", lambda spec: RaisingJudge(StatsJudge(spec.judge, spec.scaffold.budget), at)
    )


async def test_a_review_that_raises_does_not_stop_the_service_and_k_in_a_row_do(tmp_path, monkeypatch):
    raising_judge(monkeypatch, at=[1, 3, 4])
    run_dir = tmp_path / "run"
    service = ScaffoldService(
        write_spec(tmp_path, "{probe_fraction: 0.5, max_failed_reviews: 2}"), str(run_dir)
    )
    for step in range(4):
        await play(service, step, wins=2)  # step 1's review raises; step 2's pins are served
    state = await service.state()
    assert state.reviewed_steps == (0, 1, 2, 3) and state.failed_reviews_in_a_row == 1
    failed = read_events(run_dir / "events.jsonl", ReviewFailedEvent)
    assert [(e.step, e.error) for e in failed] == [
        (1, "RuntimeError: judge bug at step 1"),
        (3, "RuntimeError: judge bug at step 3"),
    ]
    ends = read_events(run_dir / "events.jsonl", StepEndEvent)
    assert [e.metrics["review/failed"] for e in ends] == [0.0, 1.0, 0.0, 1.0]

    await play(service, 4, wins=2)  # the second in a row: the next pin stops verl's job
    with pytest.raises(TrainingError, match="step 4: 2 reviews in a row raised.*judge bug at step 4"):
        await play(service, 5, wins=2)
    service.events.close()


async def test_a_restarted_service_serves_the_scaffold_of_verls_checkpoint_step(tmp_path):
    spec, run_dir = write_spec(tmp_path), tmp_path / "run"
    service = ScaffoldService(spec, str(run_dir))
    after: dict[int, object] = {}
    for step, wins in enumerate((1, 2, 3, 0)):  # mixed groups: every review has evidence
        await play(service, step, wins)
        after[step] = await service.state()
    service.events.close()
    # step 1's scaffold has entries (the pins below carry its version), and step 3's is another
    assert after[3].version > after[1].version >= 1 and after[3].judge != after[1].judge
    # verl saved its checkpoint at global step 2 (pats step 1), then the job was preempted during
    # step 3; a new job resumes from that checkpoint and starts a new service.
    (run_dir / TRACKER).parent.mkdir(parents=True)
    (run_dir / TRACKER).write_text("2")
    resumed = ScaffoldService(spec, str(run_dir))
    served = await resumed.state()
    assert (served.version, served.hash, served.judge) == (after[1].version, after[1].hash, after[1].judge)
    from pats.engine.run import make_env_factory

    task = make_env_factory(resumed.spec)().tasks("train")[0]
    pins = [await resumed.pin("g2", task.model_dump_json(), 3) for _ in range(4)]  # probes first
    assert {p.view.version for p in pins if p.scaffolded} == {after[1].hash}
    # The event log, metrics.jsonl and the scaffold's versions are cut back to step 1 too.
    assert [e.step for e in read_events(run_dir / "events.jsonl", StepEndEvent)] == [0, 1]
    assert [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [0, 1]
    assert max(int(p.stem) for p in (run_dir / "scaffold" / "versions").glob("*.json")) == after[1].version
    resumed.events.close()


async def test_the_service_refuses_a_checkpoint_it_has_no_scaffold_state_for(tmp_path):
    spec, run_dir = write_spec(tmp_path), tmp_path / "run"
    service = ScaffoldService(spec, str(run_dir))
    await play(service, 0, wins=1)
    service.events.close()
    (run_dir / TRACKER).parent.mkdir(parents=True)
    (run_dir / TRACKER).write_text("5")  # a checkpoint saved before its step's review ended
    with pytest.raises(PrerequisiteError, match="no scaffold state for that step.*earlier checkpoint"):
        ScaffoldService(spec, str(run_dir))
    (run_dir / TRACKER).write_text("1")
    resumed = ScaffoldService(spec, str(run_dir))
    task = Task(id="t", type="twc", split="train", env="twx")
    with pytest.raises(PrerequisiteError, match="verl plays step 3 .*scaffold of step 0.*disagree"):
        await resumed.pin("g3", task.model_dump_json(), 4)  # verl resumed from another checkpoint
    with pytest.raises(PrerequisiteError, match="verl plays step 3"):
        await resumed.pin("g3", task.model_dump_json(), 4)  # and every later pin of the job
    resumed.events.close()
