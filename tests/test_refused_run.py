"""A refused `pats run` (a check fails once the run directory exists, e.g. LoRA that does not fit the
loaded model) leaves no run directory behind, and a refused `pats run --resume` leaves its run
directory exactly as it was. Scripted backend and fake environment: no model."""

from __future__ import annotations

import asyncio
import json

import pytest

from pats.engine import run as run_module
from pats.engine.run import new_run, resume, run_spec, train
from pats.errors import BackendError
from pats.spec.models import ExperimentSpec
from pats.testing import FakeEnv, ScriptedBackend, improving_schedule


def make_spec(root) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "refused",
            "environment": {"kind": "twx"},
            "scaffold": {"mode": "pats"},
            "trainer": {"steps": 4, "tasks_per_step": 2, "group_size": 4, "checkpoint_every": 1},
            "eval": {"every": 100, "at_start": False, "with_scaffold": False, "num_tasks": 2},
            "logging": {"root": str(root), "wandb": "disabled", "progress": False},
        }
    )


@pytest.fixture
def backend_is(monkeypatch):
    """`train` with FakeEnv, and a backend that `make` builds (or refuses to build)."""

    def use(make):
        monkeypatch.setattr(run_module, "make_env_factory", lambda spec: lambda: FakeEnv(num_tasks=4))
        monkeypatch.setattr(run_module, "make_backend", lambda spec, make_env: make())

    return use


def scripted() -> ScriptedBackend:
    return ScriptedBackend(improving_schedule(), seed=3)


def refuse() -> ScriptedBackend:
    raise BackendError("policy.lora.top_layers is 99 but the model has 30 layers; write at most 30")


def files(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_refused_run_leaves_no_run_directory(tmp_path, backend_is):
    backend_is(refuse)
    root = tmp_path / "runs"  # missing: the run creates it, and removes it again
    with pytest.raises(BackendError, match="top_layers"):
        run_spec(make_spec(root))
    assert not root.exists()


def test_a_refused_run_keeps_what_its_folder_held_before(tmp_path, backend_is):
    backend_is(refuse)
    spec = make_spec(tmp_path)
    mine = tmp_path / "refused" / "notes.txt"
    mine.parent.mkdir()
    mine.write_text("the user's")
    with pytest.raises(BackendError):
        run_spec(spec)
    assert files(tmp_path / "refused") == {"notes.txt": b"the user's"}
    backend_is(scripted)  # and the name is free for the next try
    run_spec(spec)
    assert (tmp_path / "refused" / "checkpoints" / "latest.json").is_file()


def test_a_refused_resume_leaves_its_run_directory_as_it_was(tmp_path, backend_is):
    backend_is(scripted)
    spec = make_spec(tmp_path)
    run_dir = asyncio.run(train(spec, new_run(spec)))
    # A crash after step 3's events but before its checkpoint: a resume would cut step 3 back.
    checkpoints = run_dir / "checkpoints"
    (checkpoints / "latest.json").write_text((checkpoints / "step_000002" / "state.json").read_text())
    assert json.loads((checkpoints / "latest.json").read_text())["step"] == 2
    was = files(run_dir)
    backend_is(refuse)
    with pytest.raises(BackendError):
        resume(run_dir)
    assert files(run_dir) == was
