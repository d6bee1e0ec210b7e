"""A refused `pats run` (a check fails once the run directory exists, e.g. LoRA that does not fit the
loaded model) leaves no run directory behind, and a refused `pats run --resume` leaves its run
directory exactly as it was. A run that fails after it wrote its first events (its update raises in
step 0) shows the backend's own error and leaves nothing either; one that fails after a step ended
keeps its folder, to resume. Scripted backend and fake environment: no model."""

from __future__ import annotations

import asyncio
import json

import pytest

from pats.cli.main import main
from pats.engine import run as run_module
from pats.engine.run import new_run, resume, run_spec, train
from pats.errors import BackendError
from pats.spec import spec_to_yaml
from pats.spec.models import ExperimentSpec
from pats.testing import FakeEnv, ScriptedBackend, improving_schedule


def make_spec(root, checkpoint_every: int = 1, at_start: bool = False) -> ExperimentSpec:
    return ExperimentSpec.model_validate(
        {
            "name": "refused",
            "environment": {"kind": "twx"},
            "scaffold": {"mode": "pats"},
            "trainer": {
                "steps": 4,
                "tasks_per_step": 2,
                "group_size": 4,
                "checkpoint_every": checkpoint_every,
            },
            "eval": {"every": 100, "at_start": at_start, "with_scaffold": False, "num_tasks": 2},
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


class FailingUpdate(ScriptedBackend):
    """A scripted backend whose update number `at` (0: step 0's) raises `error`; `written` is what the
    run folder held then (`run_dir` is set once the run folder is known)."""

    def __init__(self, at: int, error: BaseException):
        super().__init__(improving_schedule(), seed=3)
        self.at, self.error = at, error
        self.run_dir = None
        self.written: set[str] = set()

    async def update(self, played):
        if self.updates == self.at:
            self.written = {p.name for p in self.run_dir.iterdir()}
            raise self.error
        return await super().update(played)


def pats_run(spec: ExperimentSpec, tmp_path) -> int:
    """`pats run SPEC` on the command line, for a spec written to a file."""
    path = tmp_path / "spec.yaml"
    path.write_text(spec_to_yaml(spec))
    return main(["run", str(path)])


@pytest.mark.parametrize(
    "error",
    [
        BackendError("step 0: the update ran out of GPU memory; lower trainer.micro_batch"),
        RuntimeError("CUDA error: an illegal memory access was encountered"),
    ],
    ids=["pats-error", "bug"],
)
def test_a_run_whose_first_update_fails_shows_its_error_and_leaves_nothing(
    tmp_path, backend_is, capsys, error
):
    root = tmp_path / "runs"
    spec = make_spec(root, at_start=True)  # the evaluation before step 0 writes the first events
    backend = FailingUpdate(at=0, error=error)
    backend.run_dir = root / spec.name
    backend_is(lambda: backend)
    if isinstance(error, BackendError):  # the CLI prints the error tree's message, exit code 1
        assert pats_run(spec, tmp_path) == BackendError.exit_code
        assert capsys.readouterr().err.splitlines()[-1] == f"error: {error}"
    else:  # anything else is a bug: its own exception (and traceback) reaches the user
        with pytest.raises(RuntimeError, match="illegal memory access") as raised:
            pats_run(spec, tmp_path)
        assert raised.value is error
    assert {"spec.yaml", "events.jsonl", "metrics.jsonl"} <= backend.written  # the run had begun
    assert not root.exists()


@pytest.mark.parametrize("checkpoint_every", [1, 100], ids=["checkpointed", "events-only"])
def test_a_run_that_fails_after_a_step_ended_keeps_its_folder(tmp_path, backend_is, capsys, checkpoint_every):
    """With a checkpoint of step 0, or (checkpoint_every: 100) only step 0's end in events.jsonl: the
    folder stays and `pats run --resume` finishes the run."""
    spec = make_spec(tmp_path, checkpoint_every=checkpoint_every)
    run_dir = tmp_path / spec.name
    backend = FailingUpdate(at=1, error=BackendError("step 1: the update failed"))
    backend.run_dir = run_dir
    backend_is(lambda: backend)
    assert pats_run(spec, tmp_path) == BackendError.exit_code
    assert capsys.readouterr().err.splitlines()[-1] == "error: step 1: the update failed"
    ends = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["step"] for e in ends if e["event"] == "step_end"] == [0]
    assert (run_dir / "checkpoints" / "latest.json").is_file() == (checkpoint_every == 1)
    backend_is(scripted)
    assert main(["run", "--resume", str(run_dir)]) == 0
    assert json.loads((run_dir / "checkpoints" / "latest.json").read_text())["step"] == 3
