"""Initial scaffold banks: SkillRL's published skill-bank JSON, or pats' own, read into ADD edits.

SkillRL's format: `general_skills` and `common_mistakes` (lists), and `task_specific_skills` (ALFWorld,
WebShop) or `query_type_skills` (search QA), a dict from type name to a list of skills; `metadata` is
ignored. A skill is {skill_id, title, principle, when_to_apply[, example]}; a mistake is {mistake_id,
description, why_it_happens, how_to_avoid}. pats' format: {"entries": [{kind, scope, text}, ...]}.

Type names. SkillRL's type names are its own (ALFWorld: `pick_and_place`, `clean`, `examine`, ...;
search: query types such as `multi_hop_reasoning`), not an environment's task types. Without
`task_types` they are kept as given (scope `type:<bank name>`). With `task_types` (the environment's
names) each bank type goes to: `type_map[name]` if given; else the task type of the same name; else
every task type whose `_`-separated words contain the bank name's words in a row (`clean` ->
`pick_clean_then_place_in_recep`) plus SkillRL's ALFWorld aliases below. Bank types matching nothing
are dropped with a warning: no task of the environment would ever see them.

Departures from SkillRL: `why_it_happens` and `example` are left out to keep the prompt short (SkillRL
retrieves a few skills per task; pats renders every entry that fits the view budget); mistakes are
`general` scope, as SkillRL shows them to every task.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from pats.errors import PatsError, PrerequisiteError
from pats.scaffold.validate import scope_problem
from pats.types import AddEdit

log = logging.getLogger(__name__)

SKILLRL_KEYS = ("general_skills", "task_specific_skills", "query_type_skills", "common_mistakes")
# SkillRL sorts ALFWorld goals by keyword: "examine the X with the desklamp" is ALFWorld's
# look_at_obj_in_light, and every goal without clean/heat/cool/look/examine (so also "put two X")
# falls into pick_and_place.
SKILLRL_TYPE_ALIASES: dict[str, tuple[str, ...]] = {
    "examine": ("look_at_obj_in_light",),
    "pick_and_place": (
        "pick_and_place_simple",
        "pick_two_obj_and_place",
        "pick_and_place_with_movable_recep",
    ),
}
EXPECTED = (
    "expected a JSON object: SkillRL's format (general_skills, task_specific_skills or "
    'query_type_skills, common_mistakes) or pats\' format ({"entries": [{"kind", "scope", "text"}]})'
)


def load_bank(
    path: str | Path,
    task_types: Sequence[str] | None = None,
    type_map: Mapping[str, str | Sequence[str]] | None = None,
) -> list[AddEdit]:
    """The bank at `path` as ADD edits (skills first, then mistakes), in the file's order."""
    path = Path(path)
    if not path.is_file():
        raise PrerequisiteError(
            f"scaffold bank {path} not found; check scaffold.initial_bank in the spec. SkillRL's banks "
            "come with `pats data fetch skillrl` (into $PATS_DATA/skill_banks/skillrl; PATS_DATA defaults "
            "to ~/.cache/pats/data)"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))  # a bank is untrusted data: plain JSON only
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise PatsError(f"{path}: not a readable JSON file ({err}); {EXPECTED}") from err
    if isinstance(data, dict) and "entries" in data:
        return _pats_bank(path, data)
    if isinstance(data, dict) and any(key in data for key in SKILLRL_KEYS):
        return _skillrl_bank(path, data, task_types, type_map or {})
    found = (
        f"an object with keys {sorted(data)}" if isinstance(data, dict) else f"a JSON {type(data).__name__}"
    )
    raise PatsError(f"{path}: found {found}; {EXPECTED}")


def _pats_bank(path: Path, data: dict[str, Any]) -> list[AddEdit]:
    extra = sorted(set(data) - {"entries", "metadata"})
    if extra or not isinstance(data["entries"], list):
        raise PatsError(
            f'{path}: a pats bank is {{"entries": [...]}} (optionally "metadata"); found keys {sorted(data)}'
        )
    edits, problems = [], []
    for i, item in enumerate(data["entries"]):
        try:
            edit = AddEdit.model_validate(item)
        except ValidationError as err:
            fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg']}" for e in err.errors())
            problems.append(f"entries[{i}]: {fields}")
            continue
        if problem := scope_problem(edit.scope):
            problems.append(f"entries[{i}]: {problem}")
        if not edit.text.strip():
            problems.append(f"entries[{i}]: empty text")
        edits.append(edit)
    if problems:
        raise PatsError(
            f"{path}: {len(problems)} bad entries (each needs kind, scope, text):\n  " + "\n  ".join(problems)
        )
    return edits


def _skillrl_bank(
    path: Path,
    data: dict[str, Any],
    task_types: Sequence[str] | None,
    type_map: Mapping[str, str | Sequence[str]],
) -> list[AddEdit]:
    extra = sorted(set(data) - {*SKILLRL_KEYS, "metadata"})
    if extra:
        raise PatsError(
            f"{path}: unknown keys {extra} in a SkillRL bank; it has {', '.join(SKILLRL_KEYS)} and metadata"
        )
    if "task_specific_skills" in data and "query_type_skills" in data:
        raise PatsError(f"{path}: has both task_specific_skills and query_type_skills; keep one")
    general = _items(path, data, "general_skills", list)
    by_type = _items(path, data, "task_specific_skills", dict) or _items(
        path, data, "query_type_skills", dict
    )
    mistakes = _items(path, data, "common_mistakes", list)
    edits = [
        AddEdit(kind="skill", scope="general", text=_skill_text(path, "general_skills", i, s))
        for i, s in enumerate(general)
    ]
    dropped = []
    for bank_type, skills in by_type.items():
        where = f"task-specific skills of {bank_type!r}"
        if not isinstance(skills, list):
            raise PatsError(f"{path}: {where} should be a list of skills, found a {type(skills).__name__}")
        targets = _targets(path, bank_type, task_types, type_map)
        if not targets:
            dropped.append(bank_type)
        texts = [_skill_text(path, where, i, s) for i, s in enumerate(skills)]
        edits += [AddEdit(kind="skill", scope=f"type:{t}", text=text) for t in targets for text in texts]
    edits += [
        AddEdit(kind="mistake", scope="general", text=_mistake_text(path, i, m))
        for i, m in enumerate(mistakes)
    ]
    if dropped:
        log.warning(
            "%s: skills of bank types %s dropped: no task type of the environment (%s) matches them; "
            "map them with type_map",
            path,
            ", ".join(dropped),
            ", ".join(task_types or ()),
        )
    return edits


def _items(path: Path, data: dict[str, Any], key: str, kind: type) -> Any:
    value = data.get(key, kind())
    if not isinstance(value, kind):
        raise PatsError(
            f"{path}: {key} should be a JSON {'list' if kind is list else 'object'}, found {type(value).__name__}"
        )
    return value


def _field(path: Path, where: str, i: int, item: Any, key: str, required: bool = True) -> str:
    if not isinstance(item, dict):
        raise PatsError(f"{path}: {where}[{i}] should be an object, found {type(item).__name__}")
    value = item.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise PatsError(f"{path}: {where}[{i}] needs a non-empty text field {key!r}")
    return " ".join(value.split())


def _skill_text(path: Path, where: str, i: int, skill: Any) -> str:
    title = _field(path, where, i, skill, "title", required=False)
    text = _field(path, where, i, skill, "principle")
    when = _field(path, where, i, skill, "when_to_apply", required=False)
    text = f"{title}: {text}" if title else text
    return f"{text} (when: {when})" if when else text


def _mistake_text(path: Path, i: int, mistake: Any) -> str:
    text = _field(path, "common_mistakes", i, mistake, "description")
    fix = _field(path, "common_mistakes", i, mistake, "how_to_avoid", required=False)
    return f"{text} Instead: {fix}" if fix else text


def _targets(
    path: Path, bank_type: str, task_types: Sequence[str] | None, type_map: Mapping[str, str | Sequence[str]]
) -> list[str]:
    """The task types that get the skills of `bank_type` (see the module docstring)."""
    if bank_type in type_map:
        mapped = type_map[bank_type]
        targets = [mapped] if isinstance(mapped, str) else list(mapped)
        unknown = [t for t in targets if task_types is not None and t not in task_types]
        if unknown:
            raise PatsError(
                f"{path}: type_map sends {bank_type!r} to unknown task types {unknown}; known: {', '.join(task_types or ())}"
            )
        return targets
    if task_types is None:
        return [bank_type]
    if bank_type in task_types:
        return [bank_type]
    words = bank_type.split("_")
    aliases = SKILLRL_TYPE_ALIASES.get(bank_type, ())
    return [t for t in task_types if t in aliases or _contains_run(t.split("_"), words)]


def _contains_run(words: list[str], run: list[str]) -> bool:
    return any(words[i : i + len(run)] == run for i in range(len(words) - len(run) + 1))
