"""Render the scaffold entries that apply to one task into the text a rollout group sees.

Also `render_markdown`: a whole version as Markdown, for people browsing a run directory.

Layout: one header line, then sections from the most specific scope to the least (this task's own
entries, then its type's, then general ones); inside each, plans, then skills, then mistakes (written
as "Avoid: ..."). Under the token budget, entries are taken in that priority order and each is kept
only if the whole rendered text still fits, counted with the policy's real tokenizer; one that does not
fit is skipped and later, shorter ones may still fit.

How a turn shows the view's plans is `scaffold.plan_view` (`show_plans`, called by `place`): as
written (static), with the steps the episode has taken marked (progress), or as one "Next action:"
line (next). The view itself, and the scaffold, stay as the reviser wrote them.

Departure from the published method: the paper does not fix a layout or a packing rule for the view;
this greedy most-specific-first packing is ours, and so are the progress and next plan views.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pats.protocols import TokenCounter
from pats.scaffold.plans import next_step, steps_done
from pats.types import EMPTY_VIEW, ScaffoldEntry, ScaffoldVersion, ScaffoldView, Task

HEADER = "Guidance for this task (from training):"
SECTION_TITLES = {"task": "This task:", "type": "Tasks of this type:", "general": "All tasks:"}
KIND_ORDER = {"plan": 0, "skill": 1, "mistake": 2}
KIND_PREFIX = {"plan": "Plan: ", "skill": "", "mistake": "Avoid: "}
STEP_SEPARATOR = " -> "  # between a plan's steps ("Steps to try: a -> b -> c", pats.reviser.rules)
MORE_STEPS = "..."  # a last step that only says the plan was cut
CUT_STEPS = "... ({n} more steps cut to fit the view)"  # what a view too small for a whole plan says
_MORE = re.compile(r"^\.\.\.(?: \((\d+) more steps? cut to fit the view\))?$")  # MORE_STEPS or CUT_STEPS
DONE_MARK, NEXT_MARK = " [done]", " [next]"  # progress view
NEXT_LINE = "Next action: {step}"  # next view
PLAN_DONE_LINE = "Plan done: every step of the plan has been taken."  # next view, after the last step
PLAN_CUT_LINE = "Next action: not shown (the plan's later steps were cut to fit the view)."
_LABEL = re.compile(r"^([^:]{1,40}): ")  # "Steps to try: " before a plan's steps


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
    """The view of `entries` for `task`, at most `view_tokens` tokens; EMPTY_VIEW if nothing applies or fits.
    A step-list plan too long for what is left of the budget is shown with as many of its first steps
    as fit and CUT_STEPS saying how many were left out (counted in the view's `cut_steps`)."""
    ranked = [(rank, entry) for entry in entries if (rank := scope_rank(entry, task)) is not None]
    # Stable sort: within one scope and kind, entries keep the store's order (oldest first).
    ranked.sort(key=lambda pair: (pair[0], KIND_ORDER[pair[1].kind]))
    chosen: list[tuple[int, ScaffoldEntry]] = []
    text, tokens, cut = "", 0, 0
    for pair in ranked:
        for trial_entry, left_out in _fitting_forms(pair[1]):
            trial = [*chosen, (pair[0], trial_entry)]  # still in priority order: `ranked` is sorted
            trial_text = _render(trial)
            trial_tokens = count_tokens(trial_text)
            if trial_tokens <= view_tokens:
                chosen, text, tokens, cut = trial, trial_text, trial_tokens, cut + left_out
                break
    if not chosen:
        return EMPTY_VIEW
    ids = tuple(e.id for _, e in chosen)
    return ScaffoldView(version=version, text=text, entry_ids=ids, tokens=tokens, cut_steps=cut)


def _fitting_forms(entry: ScaffoldEntry) -> list[tuple[ScaffoldEntry, int]]:
    """(the entry as it may be shown, plan steps left out): whole first, then for a step-list plan
    each shorter prefix (at least one step) with CUT_STEPS, longest first."""
    plan = plan_steps(entry.text) if entry.kind == "plan" else None
    forms = [(entry, 0)]
    if plan is None:
        return forms
    for keep in range(len(plan.steps) - 1, 0, -1):
        left = len(plan.steps) - keep + plan.cut
        text = plan.label + STEP_SEPARATOR.join([*plan.steps[:keep], CUT_STEPS.format(n=left)])
        forms.append((entry.model_copy(update={"text": text}), len(plan.steps) - keep))
    return forms


def place(
    view: ScaffoldView,
    placement: str,
    plan_view: str = "static",
    taken: Sequence[str] = (),
    admissible: Sequence[str] = (),
) -> tuple[ScaffoldView, str]:
    """(the view for the system part, the guidance text for the turn) under `scaffold.placement`:
    'system' keeps the whole view in the system part; 'turn' moves its text next to the decision
    (render_prompt's `guidance`, before the admissible actions) and leaves the system part bare, so
    scaffolded rollouts and probes share one system prompt. In the turn, its plans are shown as
    `plan_view` says given the actions the episode has `taken` and the game's `admissible` actions
    now (`show_plans`); the system part is the same every turn, so it takes the static view only."""
    if placement == "turn":
        return EMPTY_VIEW, show_plans(view.text, taken, plan_view, admissible)
    if plan_view != "static":
        raise ValueError(
            f"plan_view {plan_view} needs placement 'turn' (the system part is fixed per episode)"
        )
    return view, ""


@dataclass(frozen=True)
class PlanSteps:
    """A plan entry's text read as steps: "<label>: <step> -> <step> -> ..." (the label optional)."""

    label: str  # "Steps to try: ", or "" when the entry has none
    steps: tuple[str, ...]  # the action strings, without a trailing MORE_STEPS / CUT_STEPS
    more: bool  # whether the plan ended with MORE_STEPS or CUT_STEPS: its later steps are not shown
    cut: int = 0  # how many steps CUT_STEPS says were left out (0 for a bare MORE_STEPS)


def plan_steps(text: str) -> PlanSteps | None:
    """The steps of a plan entry's text, or None when it is not a list of two or more steps joined by
    STEP_SEPARATOR (free-text plans are shown as written under every plan_view)."""
    label = _LABEL.match(text)
    head = label.group(0) if label and STEP_SEPARATOR not in label.group(0) else ""
    steps = [s.strip() for s in text[len(head) :].split(STEP_SEPARATOR)]
    more = _MORE.match(steps[-1])
    steps = steps[:-1] if more else steps
    if len(steps) + bool(more) < 2 or not all(steps):
        return None
    return PlanSteps(head, tuple(steps), more is not None, int(more.group(1) or 0) if more else 0)


def show_plans(text: str, taken: Sequence[str], plan_view: str, admissible: Sequence[str] = ()) -> str:
    """A rendered view's text (`render_view`) with its plan entries shown as `plan_view` says, given
    the actions the episode has taken and those the game accepts now: static, unchanged (the very same
    string); progress, each step-list plan with its taken steps marked DONE_MARK and the step
    `plans.next_step` names marked NEXT_MARK; next, only the line NEXT_LINE with that step of the first
    plan (most specific first) that has one left. Once every plan's steps are taken, PLAN_DONE_LINE
    (PLAN_CUT_LINE when a plan's later steps were not shown) above the view's other entries."""
    if plan_view == "static" or not text:
        return text
    plan_line = f"- {KIND_PREFIX['plan']}"
    lines = text.split("\n")
    if plan_view == "progress":
        out = []
        for line in lines:
            plan = plan_steps(line[len(plan_line) :]) if line.startswith(plan_line) else None
            if plan is None:
                out.append(line)
                continue
            done = steps_done(plan.steps, taken)
            upcoming = next_step(plan.steps, taken, admissible)
            marks = [DONE_MARK if d else "" for d in done]
            if upcoming is not None:  # the first not-done occurrence of the step named next
                at = next(
                    i
                    for i, (s, d) in enumerate(zip(plan.steps, done, strict=True))
                    if s == upcoming and not d
                )
                marks[at] = NEXT_MARK
            tail = [line[len(plan_line) :].split(STEP_SEPARATOR)[-1].strip()] if plan.more else []
            shown = [s + m for s, m in zip(plan.steps, marks, strict=True)]
            out.append(plan_line + plan.label + STEP_SEPARATOR.join(shown + tail))
        return "\n".join(out)
    if plan_view == "next":
        kept, plans_cut, had_plan = [], False, False
        for line in lines:
            plan = plan_steps(line[len(plan_line) :]) if line.startswith(plan_line) else None
            if plan is None:
                kept.append(line)
                continue
            had_plan, plans_cut = True, plans_cut or plan.more
            step = next_step(plan.steps, taken, admissible)
            if step is not None:
                return NEXT_LINE.format(step=step)
        rest = _without_empty_sections(kept)
        if not had_plan:
            return rest
        return "\n".join(filter(None, [PLAN_CUT_LINE if plans_cut else PLAN_DONE_LINE, rest]))
    raise ValueError(f"unknown plan_view '{plan_view}'; known: static, progress, next")


def _without_empty_sections(lines: Sequence[str]) -> str:
    """The header and the section titles that still head an entry; "" when no entry is left."""
    titles = set(SECTION_TITLES.values())
    out = []
    for i, line in enumerate(lines):
        if line in titles and (i + 1 == len(lines) or lines[i + 1] in titles):
            continue
        out.append(line)
    return "\n".join(out) if any(line.startswith("- ") for line in out) else ""


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
