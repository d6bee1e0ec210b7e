"""Metric sinks: a JSONL file in the run directory and Weights & Biases (offline by default)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal

from pats.errors import PrerequisiteError
from pats.types import ScaffoldVersion

WandbMode = Literal["offline", "online", "disabled"]  # logging.wandb


class JsonlSink:
    """metrics.jsonl: one line per step, `{"step": t, ...metrics}`."""

    def __init__(self, path: Path, keep_through: int | None = None):
        """`keep_through`: on resume, lines of later steps (to be redone) are dropped."""
        path.parent.mkdir(parents=True, exist_ok=True)
        if keep_through is not None and path.exists():
            lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
            kept = [x for x in lines if x.endswith("\n") and json.loads(x)["step"] <= keep_through]
            path.write_text("".join(kept), encoding="utf-8")
        self._file = path.open("a", encoding="utf-8")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._file.write(json.dumps({"step": step, **metrics}) + "\n")
        self._file.flush()

    def scaffold(self, step: int, version: ScaffoldVersion) -> None:
        return None  # every version is already a file under scaffold/versions/

    def close(self) -> None:
        self._file.close()


class WandbSink:
    """W&B run in `mode` (offline writes under the run dir; `wandb sync` uploads later).

    Besides the metrics: each new scaffold version as a table (`scaffold/entries`, one row per entry:
    what the policy is being told, at which step), and at the end the run's scaffold folder (every
    version and the judge's state) as an artifact of type `scaffold`. `run_id` is kept by the caller
    so a resumed pats run continues the same W&B run.
    """

    COLUMNS = ("version", "id", "kind", "scope", "text", "tokens", "created_step", "updated_step", "cites")

    def __init__(
        self,
        run_dir: Path,
        project: str,
        entity: str | None,
        mode: WandbMode,
        name: str,
        config: dict,
        run_id: str | None = None,
        group: str | None = None,
    ):
        try:
            import wandb
        except ImportError:
            raise PrerequisiteError(
                "W&B logging needs wandb: `pip install wandb`, or set logging.wandb: disabled"
            ) from None
        os.environ.setdefault("WANDB_SILENT", "true")
        self._run = wandb.init(
            project=project,
            entity=entity,
            mode=mode,
            name=name,
            config=config,
            dir=str(run_dir),
            id=run_id,
            group=group,
            resume="allow" if run_id else None,
            reinit="finish_previous",
        )
        self.run_id = self._run.id
        self._run_dir, self._name = run_dir, name

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def scaffold(self, step: int, version: ScaffoldVersion) -> None:
        import wandb

        rows = [
            [
                version.number,
                e.id,
                e.kind,
                e.scope,
                e.text,
                e.tokens,
                e.created_step,
                e.updated_step,
                " ".join(e.cites),
            ]
            for e in version.entries
        ]
        self._run.log({"scaffold/entries": wandb.Table(columns=list(self.COLUMNS), data=rows)}, step=step)

    def close(self) -> None:
        import wandb

        folder = self._run_dir / "scaffold"
        if folder.is_dir() and any(folder.iterdir()):
            artifact = wandb.Artifact(f"{self._name}-scaffold", type="scaffold")
            artifact.add_dir(str(folder))
            self._run.log_artifact(artifact)
        finish(self._run)


def finish(run) -> None:
    """End a W&B run with its records on disk. wandb 0.31's `finish` can return before wandb-core
    has written them (on a loaded machine the offline .wandb file held only its header when read
    right after, and a process exiting then loses them); `teardown` waits for the service to flush
    and stop (the next `wandb.init` starts it again, ~0.4 s)."""
    import wandb

    run.finish()
    wandb.teardown()


def log_report_artifact(
    run_dir: Path, project: str, entity: str | None, mode: WandbMode, name: str, run_id: str, config: dict
) -> None:
    """`pats report`'s folder as an artifact `<name>-report` of the run's own W&B run (resumed by id;
    offline, `wandb sync` uploads it to the same run). The run's name and config are given again: an
    offline resume cannot read them back, and without them the report's run shows up nameless."""
    import wandb

    os.environ.setdefault("WANDB_SILENT", "true")
    run = wandb.init(
        project=project, entity=entity, mode=mode, id=run_id, resume="allow", dir=str(run_dir),
        name=name, config=config, reinit="finish_previous",
    )  # fmt: skip
    artifact = wandb.Artifact(f"{name}-report", type="report")
    artifact.add_dir(str(run_dir / "report"))
    run.log_artifact(artifact)
    finish(run)
