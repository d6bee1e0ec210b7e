"""Render the scaffold entries that apply to one task into the text a rollout group sees.

Also `render_markdown`: a whole version as Markdown, for people browsing a run directory.

Layout: one header line, then sections from the most specific scope to the least (this task's own
entries, then its type's, then general ones); inside each, plans, then skills, then mistakes (written
as "Avoid: ..."). Under the token budget, entries are taken in that priority order and each is kept
only if the whole rendered text still fits, counted with the policy's real tokenizer; one that does not
fit is skipped and later, shorter ones may still fit.

Departure from the published method: the paper does not fix a layout or a packing rule for the view;
this greedy most-specific-first packing is ours.
"""

from __future__ import annotations

from collections.abc import Sequence

from pats.protocols import TokenCounter
from pats.types import EMPTY_VIEW, ScaffoldEntry, ScaffoldVersion, ScaffoldView, Task

HEADER = "Guidance for this task (from training):"
SECTION_TITLES = {"task": "This task:", "type": "Tasks of this type:", "general": "All tasks:"}
KIND_ORDER = {"plan": 0, "skill": 1, "mistake": 2}
KIND_PREFIX = {"plan": "Plan: ", "skill": "", "mistake": "Avoid: "}


def scope_rank(entry: ScaffoldEntry, task: Task) -> int | None:
    """0 for this task's entries, 1 for its type's, 2 for general ones, None if it does not apply."""
    if entry.scope == f"task:{task.id}":
        return 0
    if entry.scope == f"type:{task.type}":
        return 1
    if entry.scope == "general":
        return 2
    return None


def _section_key(rank: int) -> str:
    return ("task", "type", "general")[rank]


def _render(chosen: Sequence[tuple[int, ScaffoldEntry]]) -> str:
    lines = [HEADER]
    current_rank = None
    for rank, entry in chosen:
        if rank != current_rank:
            lines.append(SECTION_TITLES[_section_key(rank)])
            current_rank = rank
        # One line per entry: collapse newlines so an entry cannot forge a section header.
        text = " ".join(entry.text.split())
        lines.append(f"- {KIND_PREFIX[entry.kind]}{text}")
    return "\n".join(lines)


def render_view(
    entries: Sequence[ScaffoldEntry],
    task: Task,
    count_tokens: TokenCounter,
    view_tokens: int,
    version: str,
) -> ScaffoldView:
    """The view of `entries` for `task`, at most `view_tokens` tokens; EMPTY_VIEW if nothing applies or fits."""
    ranked = [(rank, entry) for entry in entries if (rank := scope_rank(entry, task)) is not None]
    # Stable sort: within one scope and kind, entries keep the store's order (oldest first).
    ranked.sort(key=lambda pair: (pair[0], KIND_ORDER[pair[1].kind]))
    chosen: list[tuple[int, ScaffoldEntry]] = []
    text, tokens = "", 0
    for pair in ranked:
        trial = [*chosen, pair]  # still in priority order: `ranked` is sorted
        trial_text = _render(trial)
        trial_tokens = count_tokens(trial_text)
        if trial_tokens <= view_tokens:
            chosen, text, tokens = trial, trial_text, trial_tokens
    if not chosen:
        return EMPTY_VIEW
    return ScaffoldView(version=version, text=text, entry_ids=tuple(e.id for _, e in chosen), tokens=tokens)


def place(view: ScaffoldView, placement: str) -> tuple[ScaffoldView, str]:
    """(the view for the system part, the guidance text for the turn) under `scaffold.placement`:
    'system' keeps the whole view in the system part; 'turn' moves its text next to the decision
    (render_prompt's `guidance`, before the admissible actions) and leaves the system part bare, so
    scaffolded rollouts and probes share one system prompt."""
    if placement == "turn":
        return EMPTY_VIEW, view.text
    return view, ""


def with_scaffold(system_prompt: str, view: ScaffoldView) -> str:
    """The system prompt with the view appended; the very same string when the view is empty."""
    if view.empty:
        return system_prompt
    return system_prompt + "\n\n" + view.text


def render_markdown(version: ScaffoldVersion) -> str:
    """A whole version for people: entries grouped by scope (general, then types, then tasks)."""
    parent = version.parent or "none"
    total = sum(e.tokens for e in version.entries)
    lines = [
        f"# Scaffold version {version.number}",
        "",
        f"hash `{version.hash}`, parent `{parent}`, step {version.step}, "
        f"{len(version.entries)} entries, {total} tokens",
    ]
    order = {"general": 0, "type": 1, "task": 2}
    scopes = sorted({e.scope for e in version.entries}, key=lambda s: (order[s.split(":", 1)[0]], s))
    for scope in scopes:
        lines += ["", f"## {scope}", ""]
        for e in sorted((e for e in version.entries if e.scope == scope), key=lambda e: KIND_ORDER[e.kind]):
            cites = f"; cites {', '.join(e.cites)}" if e.cites else ""
            lines.append(
                f"- **{e.id}** {e.kind} (steps {e.created_step}-{e.updated_step}, {e.tokens} tokens{cites}): "
                + " ".join(e.text.split())
            )
    return "\n".join(lines) + "\n"
