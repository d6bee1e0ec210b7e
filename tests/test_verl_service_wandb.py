"""verl's scaffold service, in-process (no Ray): its step metrics and scaffold tables reach a W&B run
`<name>-scaffold` (offline) and metrics.jsonl, as the local engine's do."""

from __future__ import annotations

import json

from pats.backends.verl.service import ScaffoldService
from pats.types import Rollout, Turn


def rollout(rid: str, task_id: str, won: bool, version: str, scaffolded: bool) -> str:
    # An action that moves the game: a won episode of only 'look around' makes no plan (it changes nothing).
    turn = Turn(observation="o", action="take apple", output="take apple", reward=float(won))
    return Rollout(
        id=rid, task_id=task_id, scaffolded=scaffolded, scaffold_version=version, turns=(turn,),
        reward=float(won), success=won, truncated=not won,
    ).model_dump_json()  # fmt: skip


async def test_the_service_logs_step_metrics_and_versions_to_wandb(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: verl-wandb\n"
        "environment: {kind: twx, game: twc, params: {numLocations: 1, numItemsToPutAway: 1},\n"
        "  num_train_tasks: 2, num_eval_tasks: 1, max_turns: 4}\n"
        "policy: {max_new_tokens: 16}\n"
        "scaffold: {probe_fraction: 0.5}\n"
        "trainer: {backend: verl, max_response_tokens: 1024, tasks_per_step: 1, group_size: 4, gpus_per_node: 1}\n"
        f"logging: {{root: {tmp_path / 'runs'}, wandb: offline}}\n"
    )
    run_dir = tmp_path / "run"
    service = ScaffoldService(str(spec), str(run_dir))
    from pats.engine.run import make_env_factory

    env_task = make_env_factory(service.spec)().tasks("train")[0]
    for step in (0, 1):
        uid = f"g{step}"
        for i in range(4):
            pinned = await service.pin(uid, env_task.model_dump_json(), step + 1)
            won = i % 2 == 1  # a mixed group: the review has evidence
            await service.report(
                uid, rollout(f"{uid}-{i}", env_task.id, won, pinned.view.version, pinned.scaffolded)
            )
    await service.wait_reviews()
    for sink in service.sinks:
        sink.close()

    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1] and all("train/informative_fraction" in m for m in metrics)
    (run,) = (run_dir / "wandb").glob("offline-run-*")
    staged = b"".join(p.read_bytes() for p in run.glob("*.wandb"))
    assert b"verl-wandb-scaffold" in staged and b"train/informative_fraction" in staged
    versions = sorted((run_dir / "scaffold" / "versions").glob("*.json"))
    tables = list((run / "files" / "media" / "table" / "scaffold").glob("entries_*.table.json"))
    assert len(versions) > 1 and tables, "a version made by a review reaches W&B as a table"
