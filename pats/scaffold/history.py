"""How a run's guidance evolved: each scaffold version as the entries it added, changed and removed.

Read from the run directory's scaffold/versions/*.json (the store's own files, checked against their
hashes), so `pats scaffold RUN_DIR` needs no model and works on a run that is still going.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pats.errors import PatsError
from pats.scaffold.store import ScaffoldStore
from pats.types import ScaffoldEntry, ScaffoldVersion


@dataclass(frozen=True)
class Change:
    """One version against its predecessor."""

    version: ScaffoldVersion
    added: tuple[ScaffoldEntry, ...]
    updated: tuple[tuple[ScaffoldEntry, ScaffoldEntry], ...]  # (before, after)
    removed: tuple[ScaffoldEntry, ...]


def open_store(run_dir: Path) -> ScaffoldStore:
    """The run's scaffold store, read-only use (`versions()`, `version(n)`)."""
    folder = Path(run_dir) / "scaffold"
    if not (folder / "versions").is_dir():
        raise PatsError(
            f"{run_dir} has no scaffold/versions/: not a run directory, or a run with scaffold.mode none "
            "(give the folder `pats run` wrote, e.g. runs/quickstart)"
        )
    return ScaffoldStore.open(folder, count_tokens=len, view_tokens=1)


def diff(before: ScaffoldVersion, after: ScaffoldVersion) -> Change:
    old = {e.id: e for e in before.entries}
    new = {e.id: e for e in after.entries}
    return Change(
        version=after,
        added=tuple(e for i, e in new.items() if i not in old),
        updated=tuple((old[i], e) for i, e in new.items() if i in old and old[i].text != e.text),
        removed=tuple(e for i, e in old.items() if i not in new),
    )


def _line(mark: str, e: ScaffoldEntry) -> str:
    cites = f"   [cites {', '.join(e.cites)}]" if e.cites and mark != "-" else ""
    return f"  {mark} {e.id} {e.kind:7s} {e.scope}: {e.text}{cites}"


def format_change(c: Change, title: str) -> list[str]:
    v = c.version
    total = sum(e.tokens for e in v.entries)
    lines = [f"{title}: {len(v.entries)} entries, {total} tokens"]
    lines += [_line("+", e) for e in c.added]
    lines += [_line("~", after) + f"   (was: {before.text})" for before, after in c.updated]
    lines += [_line("-", e) for e in c.removed]
    return lines


def format_history(versions: list[ScaffoldVersion]) -> str:
    lines = []
    for before, after in zip(versions, versions[1:], strict=False):
        lines += format_change(diff(before, after), f"version {after.number} (after step {after.step})")
    return "\n".join(lines) if lines else "no scaffold version was written (the scaffold never changed)"


def format_diff(before: ScaffoldVersion, after: ScaffoldVersion) -> str:
    title = f"version {before.number} -> version {after.number} (after step {after.step})"
    return "\n".join(format_change(diff(before, after), title))


def version_at(run_dir: Path, store: ScaffoldStore, step: int) -> ScaffoldVersion:
    """The version the policy's scaffolded rollouts saw at `step`, as the event log recorded it."""
    from pats.logging.events import GroupsEvent, read_events

    log = Path(run_dir) / "events.jsonl"
    steps = {e.step: e.groups for e in read_events(log, GroupsEvent)} if log.is_file() else {}
    if step not in steps:
        known = f"{min(steps)}..{max(steps)}" if steps else "none yet"
        raise PatsError(f"{run_dir} has no rollouts of step {step} in events.jsonl (steps logged: {known})")
    hashes = {g.version for g in steps[step]}
    if hashes == {""}:
        raise PatsError(f"step {step} ran without a scaffold (scaffold.mode none)")
    return store.version(max(hashes - {""}))  # one pinned version per step


def format_version(version: ScaffoldVersion) -> str:
    head = f"version {version.number} (after step {version.step}), hash {version.hash}"
    return "\n".join([head, *(_line("*", e) for e in version.entries)])


STYLES = {
    "  + ": "green",
    "  - ": "red",
    "  ~ ": "yellow",
    "  * ": "",
    "version ": "bold",
    "at step ": "bold",
}


def print_text(text: str) -> None:
    """The history on a terminal in colour (rich: added green, removed red, rewritten yellow); piped
    or redirected, the plain lines the tests and `pats report` use."""
    import sys

    if not sys.stdout.isatty():
        print(text)
        return
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    for line in text.splitlines():
        style = next((s for prefix, s in STYLES.items() if line.startswith(prefix)), "")
        console.print(Text(line, style=style))
