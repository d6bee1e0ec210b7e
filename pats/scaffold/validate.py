"""The one edit validator: every rule an edit set must meet, for the store and for the review.

Two levels, one place for each rule:
- `edit_problems(edits, entries)`: what any set must meet to become a version, and all that
  `ScaffoldStore.apply` checks: each edit is an ADD, UPDATE or DELETE; ADD scopes are `general`,
  `type:<task type>` or `task:<task id>`; a `plan` is task-scoped; UPDATE/DELETE target an existing
  entry, at most one edit per entry; ADD/UPDATE text is not empty. Given `scopes` (the review's: one
  task type's), ADDs and targets must also lie within those scopes.
- `validate_edits(...)`: one task type's set at review, as a whole: `edit_problems` within the type's
  entries and scopes, plus cited cards exist; each edit cites at least `min_citations` distinct cards;
  the mode budgets in `MODE_BUDGETS`; COMPRESS lowers the type's token count; near-duplicates are
  refused; `removal=False` forbids DELETE; `task_plans=False` forbids ADDs at task scope;
  `add_only=True` (scaffold mode grow) forbids all but ADD; no entry the set adds or updates warns
  against an action another entry of the same view prescribes, or prescribes one another warns
  against (`contradictions`). A set it accepts is one the store accepts,
  so a refused set
  goes back to the reviser (retried once with the errors, then the rules reviser answers) and never
  reaches the store.

Both return every problem at once (an empty list means the set is valid), each naming the edit by its
index in the set and saying what would be accepted, so an LLM reviser can be retried with the list.

Where it departs from (or fixes what is open in) the published method:
- A `plan` entry must be task-scoped (the method defines a plan as one task's step plan); guidance for
  a whole task type is a skill.
- "The type's entries" are the ones its prompts can see: `general`, `type:<t>`, and `task:<id>` for
  task ids in this type's cards (`type_entries`). UPDATE/DELETE of anything else is refused, so one
  type's review cannot edit another type's guidance.
- With `removal=False` a COMPRESS review may only return an empty set (any COMPRESS set shrinks the
  scaffold, which is what the ablation turns off), and a PRUNE review likewise (PRUNE only deletes).
- An empty set is valid in every mode: "nothing to change" is always an acceptable answer.
- Near-duplicates are judged against the scaffold as it would be after the set (deleted entries no
  longer count, updated ones count with their new text), so merging two entries into one is allowed.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from difflib import SequenceMatcher
from typing import NamedTuple

from pats.protocols import TokenCounter
from pats.scaffold.plans import prescribed_actions, warned_actions
from pats.types import AddEdit, DeleteEdit, EvidenceCard, ReviewMode, ScaffoldEntry, UpdateEdit

AnyEdit = AddEdit | UpdateEdit | DeleteEdit

NEAR_DUPLICATE = 0.85  # SequenceMatcher ratio on normalized text at or above which two texts are one


class ModeBudget(NamedTuple):
    skills: int | None  # most skill ADDs (plans count as skills); None: no count (COMPRESS)
    mistakes: int | None  # most mistake ADDs
    update: bool
    delete: bool


# COMPRESS has no ADD count: it may add only beside an UPDATE or DELETE, and must lower the tokens.
MODE_BUDGETS: dict[ReviewMode, ModeBudget] = {
    ReviewMode.EXPAND: ModeBudget(skills=2, mistakes=1, update=True, delete=False),
    ReviewMode.REVISE: ModeBudget(skills=1, mistakes=1, update=True, delete=True),
    ReviewMode.COMPRESS: ModeBudget(skills=None, mistakes=None, update=True, delete=True),
    ReviewMode.PRUNE: ModeBudget(skills=0, mistakes=0, update=False, delete=True),
}


def normalize(text: str) -> str:
    return " ".join(text.lower().split())


def similarity(a: str, b: str) -> float:
    return SequenceMatcher(None, normalize(a), normalize(b)).ratio()


def is_near_duplicate(a: str, b: str) -> bool:
    return similarity(a, b) >= NEAR_DUPLICATE


def type_scopes(task_type: str, task_ids: Iterable[str]) -> set[str]:
    """The scopes a prompt of this type can see, for the given task ids."""
    return {"general", f"type:{task_type}"} | {f"task:{t}" for t in task_ids}


def type_entries(
    entries: Sequence[ScaffoldEntry], task_type: str, task_ids: Iterable[str]
) -> list[ScaffoldEntry]:
    """Entries that apply to the type: general, type:<t>, and task:<id> for the given task ids."""
    scopes = type_scopes(task_type, task_ids)
    return [e for e in entries if e.scope in scopes]


def seen_by_type(entries: Sequence[ScaffoldEntry], task_type: str) -> list[ScaffoldEntry]:
    """Entries some prompt of the type can show: general, type:<t>, and every task's own. `entries`
    are the type's (`ScaffoldStore.entries_for_type`, what a review is handed), so their task-scoped
    ones are this type's tasks, reviewed this step or not: a type entry shares a view with all of them."""
    return [e for e in entries if e.scope in ("general", f"type:{task_type}") or e.scope.startswith("task:")]


def label(i: int, edit: AnyEdit) -> str:
    if isinstance(edit, AddEdit):
        return f"edit {i} (ADD {edit.kind} {edit.scope})"
    return f"edit {i} ({edit.op} {edit.entry_id})"


def validate_edits(
    edits: Sequence[AnyEdit],
    mode: ReviewMode,
    entries: Sequence[ScaffoldEntry],
    cards: Sequence[EvidenceCard],
    count_tokens: TokenCounter,
    *,
    removal: bool,
    min_citations: int,
    task_type: str,
    task_plans: bool = True,
    add_only: bool = False,
    plans_per_review: int,
) -> list[str]:
    """Every problem of one task type's edit set for this mode (empty list: valid); the store's rules
    (`edit_problems`) are among them, checked within the type's entries and scopes."""
    mode = ReviewMode(mode)
    card_ids = {c.id for c in cards}
    task_ids = sorted({c.task_id for c in cards if c.task_type == task_type})
    scopes = type_scopes(task_type, task_ids)
    problems: list[str] = []

    problems += _citation_problems(edits, card_ids, min_citations)
    problems += _mode_problems(edits, mode, removal, plans_per_review)
    problems += edit_problems(edits, entries, scopes=scopes)
    problems += _duplicate_problems(edits, entries)
    problems += _contradiction_problems(edits, seen_by_type(entries, task_type))
    if not task_plans:
        problems += [
            f"{label(i, e)}: scaffold.task_plans is false, so nothing is added at task scope; write guidance "
            f"for the whole type (scope type:{task_type}) or drop this ADD"
            for i, e in enumerate(edits)
            if isinstance(e, AddEdit) and e.scope.startswith("task:")
        ]
    if add_only:  # scaffold mode grow: a bank that only grows (SkillRL-like)
        problems += [
            f"{label(i, e)}: mode grow only adds entries; return ADD edits only"
            for i, e in enumerate(edits)
            if not isinstance(e, AddEdit)
        ]

    if mode is ReviewMode.COMPRESS and edits:
        if not removal:
            problems.append(
                "edit set (COMPRESS): removal is off (scaffold.removal: false), so a COMPRESS review may "
                "not shrink the scaffold; return an empty edit set"
            )
        else:
            view = type_entries(entries, task_type, task_ids)
            before = sum(count_tokens(e.text) for e in view)
            after = sum(count_tokens(text) for text in texts_after(view, edits))
            if after >= before:
                problems.append(
                    f"edit set (COMPRESS): the type's entries go from {before} to {after} tokens; COMPRESS "
                    "must lower the total: delete or shorten entries, and add no more than you remove"
                )
    return problems


def scope_problem(scope: str) -> str | None:
    """Why `scope` is not `general`, `type:<task type>` or `task:<task id>`; None when it is."""
    if scope == "general":
        return None
    for prefix in ("type:", "task:"):
        name = scope[len(prefix) :] if scope.startswith(prefix) else ""
        if name and not any(c.isspace() for c in name):
            return None
    return f"scope {scope!r} is not 'general', 'type:<task type>' or 'task:<task id>' (no spaces in the name)"


def edit_problems(
    edits: Sequence[object], entries: Sequence[ScaffoldEntry], *, scopes: Collection[str] | None = None
) -> list[str]:
    """Every problem that keeps the set from becoming the next version of `entries` (empty: none).

    The store checks exactly this against its current entries. `scopes`: the scopes the set may add to
    and edit in (the review passes one task type's, with the type's entries); None: any valid scope.
    """
    by_id = {e.id: e for e in entries}
    editable = [e.id for e in entries if scopes is None or e.scope in scopes]
    targeted: dict[str, int] = {}  # entry id -> the first edit that changes it
    problems: list[str] = []
    for i, edit in enumerate(edits):
        if isinstance(edit, AddEdit):
            if problem := _add_problem(edit, scopes):
                problems.append(f"{label(i, edit)}: {problem}")
        elif isinstance(edit, (UpdateEdit, DeleteEdit)):
            problems += _target_problems(i, edit, by_id, editable, scopes, targeted)
        else:
            problems.append(f"edit {i}: a {type(edit).__name__} is not an ADD, UPDATE or DELETE edit")
            continue
        if isinstance(edit, (AddEdit, UpdateEdit)) and not edit.text.strip():
            problems.append(f"{label(i, edit)}: text is empty; write the guidance text, or DELETE instead")
    return problems


def _add_problem(edit: AddEdit, scopes: Collection[str] | None) -> str | None:
    if scopes is not None and edit.scope not in scopes:
        allowed = ", ".join(f"'{s}'" for s in sorted(scopes))
        return f"scope '{edit.scope}' is not one of this type's; use one of {allowed}"
    if problem := scope_problem(edit.scope):
        return problem
    if edit.kind == "plan" and not edit.scope.startswith("task:"):
        tasks = ", ".join(f"'{s}'" for s in sorted(scopes or ()) if s.startswith("task:"))
        return (
            f"a plan belongs to one task; scope it 'task:<task id>'{f' (one of {tasks})' if tasks else ''}, "
            f"or make it kind 'skill' to guide every task in scope '{edit.scope}'"
        )
    return None


def _target_problems(
    i: int,
    edit: UpdateEdit | DeleteEdit,
    by_id: dict[str, ScaffoldEntry],
    editable: list[str],
    scopes: Collection[str] | None,
    targeted: dict[str, int],
) -> list[str]:
    problems = []
    entry = by_id.get(edit.entry_id)
    if entry is None:
        known = ", ".join(editable[:30]) + (", ..." if len(editable) > 30 else "") or "none"
        whose = "the current" if scopes is None else "this type's"
        problems.append(
            f"{label(i, edit)}: no entry '{edit.entry_id}' exists; {edit.op} only ids of {whose} entries "
            f"({known})"
        )
    elif scopes is not None and entry.scope not in scopes:
        problems.append(
            f"{label(i, edit)}: entry '{edit.entry_id}' is scoped '{entry.scope}', not this "
            f"type's; edit only entries scoped {', '.join(sorted(scopes))}"
        )
    if edit.entry_id in targeted:
        problems.append(
            f"{label(i, edit)}: entry '{edit.entry_id}' is already edited by edit "
            f"{targeted[edit.entry_id]}; edit each entry at most once per set"
        )
    targeted.setdefault(edit.entry_id, i)
    return problems


def _citation_problems(edits: Sequence[AnyEdit], card_ids: set[str], min_citations: int) -> list[str]:
    problems = []
    example = ", ".join(sorted(card_ids)[:3]) or "none this step"
    for i, edit in enumerate(edits):
        for cid in dict.fromkeys(edit.cites):
            if cid not in card_ids:
                problems.append(
                    f"{label(i, edit)}: cites unknown card '{cid}'; cite ids of this step's cards "
                    f"(e.g. {example})"
                )
        distinct = len(set(edit.cites))
        if distinct < min_citations:
            problems.append(
                f"{label(i, edit)}: cites {distinct} distinct card(s); cite at least {min_citations} "
                "distinct card ids that support it"
            )
    return problems


def counted_skills(adds: Sequence[AddEdit], plans_per_review: int) -> list[int]:
    """Positions in `adds` of the ADDs that count against a mode's skill budget: every skill, and every
    plan past the first `plans_per_review` (scaffold.plans_per_review; 0: plans count as skills)."""
    free = [i for i, a in enumerate(adds) if a.kind == "plan"][:plans_per_review]
    return [i for i, a in enumerate(adds) if a.kind in ("skill", "plan") and i not in free]


def _mode_problems(
    edits: Sequence[AnyEdit], mode: ReviewMode, removal: bool, plans_per_review: int
) -> list[str]:
    budget = MODE_BUDGETS[mode]
    problems = []
    adds = [(i, e) for i, e in enumerate(edits) if isinstance(e, AddEdit)]
    skills = [adds[k][0] for k in counted_skills([e for _, e in adds], plans_per_review)]
    mistakes = [i for i, e in adds if e.kind == "mistake"]
    if mode is ReviewMode.PRUNE:
        for i, edit in enumerate(edits):
            if not isinstance(edit, DeleteEdit):
                problems.append(
                    f"{label(i, edit)}: PRUNE only deletes; drop this edit and DELETE the type's least "
                    "useful entries until it is under budget"
                )
    elif mode is ReviewMode.COMPRESS:
        if adds and not any(isinstance(e, (UpdateEdit, DeleteEdit)) for e in edits):
            for i, edit in adds:
                problems.append(
                    f"{label(i, edit)}: COMPRESS adds only beside an UPDATE or DELETE of what it "
                    "replaces; merge into an existing entry with UPDATE, or DELETE the entries it replaces"
                )
    else:
        for kinds, idx, most in (
            ("skill/plan", skills, budget.skills),
            ("mistake", mistakes, budget.mistakes),
        ):
            if most is not None and len(idx) > most:
                problems.append(
                    f"edits {', '.join(map(str, idx))}: {len(idx)} {kinds} ADDs; {mode.value} accepts at "
                    f"most {budget.skills} skill/plan ADDs (plans count as skills"
                    + (f", past the first {plans_per_review} plans" if plans_per_review else "")
                    + f") and {budget.mistakes} mistake ADD; keep the best-supported ones"
                )
    for i, edit in enumerate(edits):
        if not isinstance(edit, DeleteEdit):
            continue
        if not removal:
            problems.append(
                f"{label(i, edit)}: removal is off (scaffold.removal: false), so nothing is deleted; "
                "drop this DELETE (UPDATE the entry instead if its text is wrong)"
            )
        elif not budget.delete:
            problems.append(
                f"{label(i, edit)}: {mode.value} does not delete; drop this DELETE (deletions are for "
                "REVISE, COMPRESS and PRUNE) or UPDATE the entry instead"
            )
    return problems


def texts_after(view: Sequence[ScaffoldEntry], edits: Sequence[AnyEdit]) -> list[str]:
    """Texts of the entries once the set is applied (targets that do not exist change nothing)."""
    deleted = {e.entry_id for e in edits if isinstance(e, DeleteEdit)}
    updated = {e.entry_id: e.text for e in edits if isinstance(e, UpdateEdit)}
    texts = [updated.get(e.id, e.text) for e in view if e.id not in deleted]
    return texts + [e.text for e in edits if isinstance(e, AddEdit)]


def _duplicate_problems(edits: Sequence[AnyEdit], entries: Sequence[ScaffoldEntry]) -> list[str]:
    """ADD/UPDATE texts too close to another entry of the same scope, or to another ADD of the set."""
    by_id = {e.id: e for e in entries}
    deleted = {e.entry_id for e in edits if isinstance(e, DeleteEdit)}
    # Existing entries as they will read after the set, with the index of the edit that updates them.
    after: dict[str, tuple[str, int | None]] = {e.id: (e.text, None) for e in entries if e.id not in deleted}
    for i, edit in enumerate(edits):
        if isinstance(edit, UpdateEdit) and edit.entry_id in after:
            after[edit.entry_id] = (edit.text, i)

    problems = []
    for i, edit in enumerate(edits):
        if isinstance(edit, DeleteEdit) or not edit.text.strip():
            continue
        if isinstance(edit, AddEdit):
            scope, own = edit.scope, None
        elif edit.entry_id in by_id:
            scope, own = by_id[edit.entry_id].scope, edit.entry_id
        else:
            continue  # unknown target, reported already
        for entry_id, (text, updater) in after.items():
            if entry_id == own or by_id[entry_id].scope != scope:
                continue
            if updater is not None and updater > i:
                continue  # two UPDATEs that collide are reported once, at the later one
            if is_near_duplicate(edit.text, text):
                problems.append(
                    f"{label(i, edit)}: text is a near-duplicate of entry '{entry_id}' in scope '{scope}' "
                    f"(similarity {similarity(edit.text, text):.2f} >= {NEAR_DUPLICATE}); "
                    f"UPDATE '{entry_id}' instead, or say something it does not"
                )
        if isinstance(edit, AddEdit):
            for j in range(i):
                other = edits[j]
                if isinstance(other, AddEdit) and is_near_duplicate(edit.text, other.text):
                    problems.append(
                        f"{label(i, edit)}: text is a near-duplicate of edit {j}'s ADD "
                        f"(similarity {similarity(edit.text, other.text):.2f} >= {NEAR_DUPLICATE}); "
                        "keep one of the two"
                    )
    return problems


def shares_view(scope: str, other: str) -> bool:
    """Whether one prompt can show entries of both scopes: anything but two different tasks' own."""
    return not (scope.startswith("task:") and other.startswith("task:") and scope != other)


def contradictions(
    kind: str, scope: str, text: str, others: Iterable[tuple[str, str, str, str]]
) -> list[str]:
    """Why an entry (kind, scope, text) contradicts `others` ((name, kind, scope, text) each) that can
    share its view: an action one warns against and the other prescribes; [] when none does."""
    warns, prescribes = warned_actions(kind, text), prescribed_actions(kind, text)
    out = []
    for name, o_kind, o_scope, o_text in others:
        if not shares_view(scope, o_scope):
            continue
        for action in sorted(warns & prescribed_actions(o_kind, o_text)):
            out.append(f"it warns against '{action}', which {name} ({o_scope}) prescribes")
        for action in sorted(prescribes & warned_actions(o_kind, o_text)):
            out.append(f"it prescribes '{action}', which {name} ({o_scope}) warns against")
    return out


def _contradiction_problems(edits: Sequence[AnyEdit], view: Sequence[ScaffoldEntry]) -> list[str]:
    """ADDs and UPDATEs that would leave an entry of a view warning against what another prescribes."""
    deleted = {e.entry_id for e in edits if isinstance(e, DeleteEdit)}
    updated = {e.entry_id: e.text for e in edits if isinstance(e, UpdateEdit)}
    after = [
        (f"entry '{e.id}'", e.kind, e.scope, updated.get(e.id, e.text)) for e in view if e.id not in deleted
    ]
    by_id = {e.id: e for e in view}
    problems = []
    for i, edit in enumerate(edits):
        if isinstance(edit, AddEdit):
            kind, scope = edit.kind, edit.scope
        elif isinstance(edit, UpdateEdit) and edit.entry_id in by_id:
            kind, scope = by_id[edit.entry_id].kind, by_id[edit.entry_id].scope
        else:
            continue
        own = f"entry '{edit.entry_id}'" if isinstance(edit, UpdateEdit) else None
        earlier = [
            (f"edit {j}'s ADD", e.kind, e.scope, e.text)
            for j, e in enumerate(edits[:i])
            if isinstance(e, AddEdit)
        ]
        others = [o for o in after if o[0] != own] + earlier
        for why in contradictions(kind, scope, edit.text, others):
            problems.append(
                f"{label(i, edit)}: {why} in the same view; drop one of the two, or DELETE or UPDATE the "
                "entry in this set so the view says one thing"
            )
    return problems
