"""Reviser bundles: exactly what one reviser call of a real run was given, recorded as JSON to replay.

A bundle is one task type's review at one step: the step's evidence cards (all of them, as the review
passes them; the reviser shows its type's), the judge's assessment (mode, statistics, verdicts), the
scaffold entries the review handed the reviser (`ScaffoldStore.entries_for_type` of the version the
step's groups were pinned to), and the run's scaffold section (min_citations, removal, task plans,
budget, mode) that the reviser and the validator read. `pats reviser bench` replays bundles against
any reviser, and `pats compile-reviser` compiles the reviser's program against the `train` split (a
`heldout` bundle is only ever scored); both read the bundles shipped with pats (`SHIPPED`, package
data) unless given a folder. `record(run_dir)` (`pats reviser record RUN_DIR`) makes them from a
finished run directory, read back through the event log's typed records (`card`, `assessment`,
`groups` events) and the scaffold's version files, so a bundle is what the run's reviser saw, not a
reconstruction of it.

Where it departs from the run: the store's list of pinned tasks (which task-scoped entries the type
sees) is rebuilt from the `groups` events up to the step; evaluation pins are not logged, and they
matter only for task-scoped entries of evaluation tasks, which a review never writes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pats.logging.events import AssessmentEvent, CardEvent, GroupsEvent, read_events
from pats.scaffold import ScaffoldStore
from pats.spec import ExperimentSpec, load_spec
from pats.spec.models import ScaffoldSpec
from pats.types import Assessment, EvidenceCard, Record, ScaffoldEntry

# The bundles shipped with pats (package data): 19 held-out and 15 train reviews of real runs, described
# in docs/llm.md, "Reviser benchmark".
SHIPPED = Path(__file__).resolve().parent / "shipped_bundles"


class ReviserBundle(Record):
    """One reviser call's input: `LLMReviser.revise(step, assessment, cards, entries)` and the settings
    that the reviser and `validate_edits` take from the run's spec."""

    name: str  # <environment>-<run>-s<step>-<task type> (the first ten, recorded earlier: no <run>)
    source: str  # how it was recorded: the run directory's name and what played it
    # train: a compiler's (demos, bootstrapping); heldout: scored only, never compiled against
    split: Literal["train", "heldout"] = "heldout"
    environment: str  # the spec's environment.kind
    policy_model: str  # the tokenizer the run counted scaffold tokens with
    step: int
    assessment: Assessment
    cards: tuple[EvidenceCard, ...]
    entries: tuple[ScaffoldEntry, ...]
    scaffold: ScaffoldSpec

    @property
    def task_type(self) -> str:
        return self.assessment.task_type

    @property
    def add_only(self) -> bool:
        return self.scaffold.mode == "grow"


def record(run_dir: Path, source: str = "", split: str = "heldout") -> list[ReviserBundle]:
    """One bundle per (step, task type) reviewed in `run_dir` (a `pats run` directory), named after
    the run, so that two runs' bundles never share a name."""
    from pats.models import token_counter

    spec: ExperimentSpec = load_spec(run_dir / "spec.yaml")
    events = run_dir / "events.jsonl"
    count = token_counter(spec.policy.model)
    store = ScaffoldStore.open(run_dir / "scaffold", count, spec.scaffold.budget.view_tokens)
    versions = store.versions()
    groups = read_events(events, GroupsEvent)
    cards = read_events(events, CardEvent)
    bundles = []
    for a in read_events(events, AssessmentEvent):
        step, task_type = a.step, a.assessment.task_type
        # The version current at the review: the one the step's groups were pinned to, else ("" is a
        # view with nothing in it) the last one committed before this step (a step's edits become a
        # version stamped with that step; an initial bank is a version stamped step 0 before any).
        pinned = {g.version for e in groups if e.step == step for g in e.groups if g.type == task_type}
        named = [v for v in versions if v.hash in pinned]
        version = named[-1] if named else [v for v in versions if v.number == 0 or v.step < step][-1]
        if pinned - {"", version.hash}:
            raise ValueError(
                f"{run_dir}: step {step} {task_type}: groups pinned {pinned}, not {version.hash}"
            )
        seen = {g.task for e in groups if e.step <= step for g in e.groups if g.type == task_type}
        scopes = {"general", f"type:{task_type}"} | {f"task:{t}" for t in seen}
        name = f"{spec.environment.kind}-{run_dir.name}-s{step}-{task_type}".replace(":", "_")
        bundles.append(
            ReviserBundle(
                name=name,
                source=source or run_dir.name,
                split=split,
                environment=spec.environment.kind,
                policy_model=spec.policy.model,
                step=step,
                assessment=a.assessment,
                cards=tuple(c.card for c in cards if c.step == step),
                entries=tuple(e for e in version.entries if e.scope in scopes),
                scaffold=spec.scaffold,
            )
        )
    return bundles


def save(bundles: Sequence[ReviserBundle], folder: Path) -> list[Path]:
    """Each bundle as <folder>/<name>.json; a file of that name with other content is never
    overwritten (FileExistsError: record the run under another name, or remove the file first)."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = {
        b.name: json.dumps(b.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n" for b in bundles
    }
    clashes = [
        n
        for n, t in texts.items()
        if (folder / f"{n}.json").exists() and (folder / f"{n}.json").read_text(encoding="utf-8") != t
    ]
    if clashes:
        raise FileExistsError(
            f"{folder} already holds other bundles named {', '.join(clashes)}; bundles are named after "
            "their run directory: record a run with another name, or remove those files first"
        )
    paths = []
    for name, text in texts.items():
        path = folder / f"{name}.json"
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths


def load(folder: Path, names: Sequence[str] = (), split: str | None = None) -> list[ReviserBundle]:
    """The bundles in `folder`, by name; `names` keeps those whose name contains one of them, in the
    order of `names` (a run stopped part way then has scored the first ones named); `split` keeps one
    split (train or heldout)."""
    paths = sorted(folder.glob("*.json"))
    if not paths:
        raise FileNotFoundError(
            f"no bundles in {folder}; record some: pats reviser record RUN_DIR --bundles {folder}"
        )
    bundles = [ReviserBundle.model_validate_json(p.read_text(encoding="utf-8")) for p in paths]
    if split is not None:
        bundles = [b for b in bundles if b.split == split]
    if not names:
        return bundles
    first = {b.name: next((i for i, n in enumerate(names) if n in b.name), None) for b in bundles}
    return sorted(
        (b for b in bundles if first[b.name] is not None), key=lambda b: (first[b.name] or 0, b.name)
    )
