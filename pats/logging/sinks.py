"""Metric sinks: a JSONL file in the run directory and Weights & Biases (offline by default)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pats.errors import PrerequisiteError


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

    def close(self) -> None:
        self._file.close()


class WandbSink:
    """W&B run in `mode` (offline writes under the run dir; `wandb sync` uploads later).

    `run_id` is kept by the caller so a resumed pats run continues the same W&B run.
    """

    def __init__(
        self,
        run_dir: Path,
        project: str,
        entity: str | None,
        mode: str,
        name: str,
        config: dict,
        run_id: str | None = None,
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
            resume="allow" if run_id else None,
            reinit="finish_previous",
        )
        self.run_id = self._run.id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        self._run.log(metrics, step=step)

    def close(self) -> None:
        self._run.finish()
