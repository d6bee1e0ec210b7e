"""The scaffold store: append-only versions of the training scaffold, one pinned view per rollout group.

`apply(edits)` validates an edit set as a whole and turns it into the next version; `pin(task)` renders
the current version for one task under the view token budget; `rollback(ref)` makes a new version equal
to an older one, so history is never rewritten and every version stays recoverable.

On disk (when the store has a directory): `versions/<number:06d>.json` holds each full version, written
atomically (temp file in the same folder, fsync, os.replace), so a crash leaves the last good version;
`current.md` renders the current version for people browsing a run; `task_types.json` keeps the task
id -> type map that `entries_for_type` needs, so a resumed run counts task-scoped entries per type.

The rules an edit set must meet are `pats.scaffold.validate.edit_problems`, the same ones the review
checks first (`check` returns them); a set that breaks one raises EditError and changes nothing.

Departures from the published method: version 0 (no entries) is implicit and never written; a `plan`
entry must be task-scoped (see pats.scaffold.validate); entry ids are `e<N>` with N never reused,
even after a rollback.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from pats.errors import PatsError
from pats.fileio import write_atomic
from pats.protocols import TokenCounter
from pats.scaffold.render import render_markdown, render_view
from pats.scaffold.validate import edit_problems
from pats.types import (
    AddEdit,
    Edit,
    ScaffoldEntry,
    ScaffoldVersion,
    ScaffoldView,
    Task,
    UpdateEdit,
)

VERSION_FILE = re.compile(r"\d{6}\.json")  # temp files (".000003.json.<pid>.tmp") never match
ENTRY_ID = re.compile(r"e(\d+)")


class EditError(PatsError):
    """An edit set the store refused. Holds every problem found; the store is left unchanged."""

    def __init__(self, problems: Sequence[str]):
        self.problems = list(problems)
        n = len(self.problems)
        super().__init__(
            f"edit set refused ({n} problem{'s' if n != 1 else ''}):\n"
            + "\n".join("  " + p for p in self.problems)
        )


def content_hash(entries: Iterable[ScaffoldEntry]) -> str:
    """sha256 of the entries' canonical JSON (ids, kinds, scopes, texts, cites; not steps), 12 hex chars."""
    payload = [
        {"id": e.id, "kind": e.kind, "scope": e.scope, "text": e.text, "cites": list(e.cites)}
        for e in sorted(entries, key=lambda e: e.id)
    ]
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def _version_files(directory: Path) -> list[tuple[int, Path]]:
    folder = directory / "versions"
    if not folder.is_dir():
        return []
    return sorted((int(p.name[:6]), p) for p in folder.iterdir() if VERSION_FILE.fullmatch(p.name))


def _empty_version() -> ScaffoldVersion:
    return ScaffoldVersion(number=0, hash=content_hash(()), step=0, parent=None, entries=())


class ScaffoldStore:
    def __init__(self, count_tokens: TokenCounter, view_tokens: int, directory: Path | None = None):
        if view_tokens < 1:
            raise PatsError(f"view_tokens must be at least 1, got {view_tokens}")
        self._count_tokens = count_tokens
        self._view_tokens = view_tokens
        self._directory = Path(directory) if directory is not None else None
        if self._directory is not None and _version_files(self._directory):
            raise PatsError(
                f"{self._directory} already holds scaffold versions; continue from them with "
                "ScaffoldStore.open(directory, ...) (or choose an empty directory)"
            )
        self._versions: list[ScaffoldVersion] = [_empty_version()]
        self._next_id = 1  # N of the next entry id e<N>; never reused
        self._task_types: dict[str, str] = {}  # task id -> task type, fed by pin()
        self._task_types_saved = 0  # how many of them task_types.json holds
        self._views: dict[tuple[str, str], ScaffoldView] = {}  # (version hash, task id) -> view

    @classmethod
    def open(
        cls, directory: Path, count_tokens: TokenCounter, view_tokens: int, upto: int | None = None
    ) -> ScaffoldStore:
        """The store persisted in `directory` (every version, in order); an empty store if there is none.

        `upto`: resuming from a checkpoint, versions after this number belong to steps the run will
        redo; their files are removed so the redone steps write them again under the same numbers.
        """
        directory = Path(directory)
        store = cls(count_tokens, view_tokens)
        for number, path in _version_files(directory):
            if upto is not None and number > upto:
                path.unlink()
                continue
            if number != len(store._versions):
                raise PatsError(
                    f"{path.parent}: version {len(store._versions):06d}.json is missing before {path.name}; "
                    "the history has a gap and cannot be rebuilt (restore the file or start a new run directory)"
                )
            try:
                version = ScaffoldVersion.model_validate_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise PatsError(f"{path}: not a readable scaffold version: {err}") from err
            if version.number != number or version.hash != content_hash(version.entries):
                raise PatsError(f"{path}: its number or content hash does not match the file; it was altered")
            store._versions.append(version)
        ids = [int(m.group(1)) for v in store._versions for e in v.entries if (m := ENTRY_ID.fullmatch(e.id))]
        store._next_id = max(ids, default=0) + 1
        types_file = directory / "task_types.json"
        if types_file.is_file():
            try:
                store._task_types = {
                    str(k): str(v) for k, v in json.loads(types_file.read_text("utf-8")).items()
                }
            except (OSError, ValueError, AttributeError) as err:
                raise PatsError(f"{types_file}: not a JSON object of task id -> task type: {err}") from err
            store._task_types_saved = len(store._task_types)
        store._directory = directory
        return store

    # ---- reading -------------------------------------------------------------------------------

    @property
    def current(self) -> ScaffoldVersion:
        return self._versions[-1]

    @property
    def directory(self) -> Path | None:
        return self._directory

    def versions(self) -> list[ScaffoldVersion]:
        return list(self._versions)

    def version(self, ref: int | str) -> ScaffoldVersion:
        """A version by number or by hash (the newest one with that hash: a rollback repeats a hash)."""
        if isinstance(ref, str):
            for version in reversed(self._versions):
                if version.hash == ref:
                    return version
            if ref.isdigit():
                ref = int(ref)
        if isinstance(ref, int) and 0 <= ref < len(self._versions):
            return self._versions[ref]
        recent = ", ".join(f"{v.number}={v.hash}" for v in self._versions[-10:])
        raise PatsError(
            f"no scaffold version {ref!r}; known numbers are 0..{len(self._versions) - 1} "
            f"(latest hashes: {recent})"
        )

    def entries_for(self, task: Task) -> list[ScaffoldEntry]:
        """Entries that apply to `task`: general, its type's and its own."""
        self._remember(task)
        scopes = {"general", f"type:{task.type}", f"task:{task.id}"}
        return [e for e in self.current.entries if e.scope in scopes]

    def entries_for_type(self, task_type: str) -> list[ScaffoldEntry]:
        """General and type entries, plus the own entries of every pinned task of that type."""
        tasks = {task_id for task_id, t in self._task_types.items() if t == task_type}
        return [
            e
            for e in self.current.entries
            if e.scope in ("general", f"type:{task_type}")
            or (e.scope.startswith("task:") and e.scope[len("task:") :] in tasks)
        ]

    def pin(self, task: Task, ref: int | str | None = None) -> ScaffoldView:
        """The current version's view for `task` (or version `ref`'s, see `version`): the same object
        on every call until a new version."""
        self._remember(task)
        version = self.current if ref is None else self.version(ref)
        key = (version.hash, task.id)
        view = self._views.get(key)
        if view is None:
            scopes = {"general", f"type:{task.type}", f"task:{task.id}"}
            entries = [e for e in version.entries if e.scope in scopes]  # entries_for, of this version
            view = render_view(entries, task, self._count_tokens, self._view_tokens, version.hash)
            self._views[key] = view
        return view

    # ---- writing -------------------------------------------------------------------------------

    def apply(self, edits: Sequence[Edit], step: int) -> ScaffoldVersion:
        """Validate the edit set as a whole and make it the next version; EditError leaves all unchanged."""
        edits = list(edits)
        if not edits:
            return self.current
        problems = self.check(edits)
        if problems:
            raise EditError(problems)
        entries = {e.id: e for e in self.current.entries}  # dicts keep order: new entries go last
        next_id = self._next_id
        for edit in edits:
            if isinstance(edit, AddEdit):
                entry_id, next_id = f"e{next_id}", next_id + 1
                text = edit.text.strip()
                entries[entry_id] = ScaffoldEntry(
                    id=entry_id,
                    kind=edit.kind,
                    scope=edit.scope,
                    text=text,
                    tokens=self._count_tokens(text),
                    created_step=step,
                    updated_step=step,
                    cites=edit.cites,
                )
            elif isinstance(edit, UpdateEdit):
                text = edit.text.strip()
                old = entries[edit.entry_id].model_dump()
                old.update(text=text, tokens=self._count_tokens(text), updated_step=step, cites=edit.cites)
                entries[edit.entry_id] = ScaffoldEntry(**old)
            else:
                del entries[edit.entry_id]
        version = self._commit(tuple(entries.values()), step)
        self._next_id = next_id
        return version

    def rollback(self, ref: int | str, step: int) -> ScaffoldVersion:
        """A new version whose entries equal those of version `ref` (history is append-only)."""
        return self._commit(self.version(ref).entries, step)

    def seed(self, entries: Sequence[AddEdit], step: int = 0) -> ScaffoldVersion:
        """Load an initial bank into an empty store as version 1."""
        if self.current.number != 0:
            raise PatsError(
                f"the store already has versions up to {self.current.number}; seed only a new store "
                "(a resumed run keeps the versions it has)"
            )
        not_adds = [
            f"entry {i}: a bank holds ADD edits only"
            for i, e in enumerate(entries, 1)
            if not isinstance(e, AddEdit)
        ]
        if not_adds:
            raise EditError(not_adds)
        return self.apply(entries, step)

    def check(self, edits: Sequence[Edit]) -> list[str]:
        """Every problem that keeps `edits` from becoming the next version (empty: `apply` accepts it).

        The rules are `pats.scaffold.validate.edit_problems`, the ones the review checks each task
        type's set against first, so a set the review accepted is accepted here.
        """
        return edit_problems(edits, self.current.entries)

    def _commit(self, entries: tuple[ScaffoldEntry, ...], step: int) -> ScaffoldVersion:
        parent = self.current
        version = ScaffoldVersion(
            number=parent.number + 1,
            hash=content_hash(entries),
            step=step,
            parent=parent.hash,
            entries=entries,
        )
        if self._directory is not None:  # persist first: a failed write leaves the store as it was
            folder = self._directory / "versions"
            folder.mkdir(parents=True, exist_ok=True)
            write_atomic(folder / f"{version.number:06d}.json", version.model_dump_json(indent=2) + "\n")
        self._versions.append(version)
        self._views.clear()  # only the current version is pinned
        if self._directory is not None:
            write_atomic(self._directory / "current.md", render_markdown(version))
            if len(self._task_types) != self._task_types_saved:
                text = json.dumps(self._task_types, indent=1, sort_keys=True)
                write_atomic(self._directory / "task_types.json", text + "\n")
                self._task_types_saved = len(self._task_types)
        return version

    def _remember(self, task: Task) -> None:
        self._task_types[task.id] = task.type
