"""Turn pydantic's validation errors into `SpecIssue`s a user can act on.

Each issue gets the dotted YAML path (union tags removed), the offending value, and what to write
instead: the allowed values, the close match for a misspelled key, the keys allowed at that level.
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from pats.errors import SpecIssue


def issues_from_validation(err: ValidationError, data: dict) -> list[SpecIssue]:
    from pats.spec.models import ExperimentSpec

    issues: list[SpecIssue] = []
    for e in err.errors():
        if e["type"] == "spec_contradiction":
            issues.extend(SpecIssue(path, msg) for path, msg in e["ctx"]["problems"])
            continue
        path, model = _yaml_path(ExperimentSpec, e["loc"])
        issues.append(SpecIssue(".".join(map(str, path)), _message(e, path, model)))
    return sorted(set(issues), key=lambda i: (i.path, i.message))


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(e: ErrorDetails, path: list, parent: type[BaseModel] | None) -> str:
    kind, ctx, value = e["type"], e.get("ctx") or {}, e.get("input")
    if kind == "extra_forbidden":
        key = str(path[-1])
        allowed = sorted(parent.model_fields) if parent else []
        kinds = _other_kinds_with(path, key, parent)
        if kinds:  # a setting of another kind of this section (trainer.on_env_fault under verl)
            tag = "backend" if "backend" in (parent.model_fields if parent else {}) else "kind"
            return (
                f"'{key}' applies to {path[0]} {tag} {' or '.join(kinds)} only; this {tag} does not use it, "
                f"so remove it. Keys allowed here: {', '.join(allowed)}"
            )
        homes = [h for h in _sections_with(key) if h != ".".join(map(str, path[:-1]))]
        if 0 < len(homes) <= 3:  # a key in the wrong section (dedented): say where it belongs
            where = " or ".join(f"under {h}:" if h else "at the top level" for h in homes)
            return f"'{key}' is not a key here; it belongs {where}. Keys allowed here: {', '.join(allowed)}"
        close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown key '{key}'; {hint}keys allowed here: {', '.join(allowed)}"
    if kind == "union_tag_invalid":
        tags = ctx.get("expected_tags", "")
        return f"unknown kind {_show(ctx.get('tag'))}; write one of: {tags.replace(chr(39), '')}"
    if kind == "union_tag_not_found":
        tag, tags = _union_tags(parent, path[-1] if path else None)
        return f"missing its {tag}; add {tag}: with one of: {', '.join(tags)}"
    if kind == "missing":
        field = parent.model_fields.get(str(path[-1])) if parent else None
        what = f" ({field.description})" if field is not None and field.description else ""
        if field is None:  # a missing section: `parent` is then the section's own model
            return (
                f"required but missing; add {path[-1]}: {_example(parent)}"
                if path
                else "required but missing"
            )
        return f"required but missing{what}; add {path[-1]}: {_example(field.annotation)}{_tags_note(field)}"
    if kind == "literal_error":
        allowed = ctx.get("expected", "").replace("'", "")
        return f"{_show(value)} is not allowed; write one of: {allowed}"
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal"}:
        bound = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[
            kind
        ]
        limit = next(iter(ctx.values()), "?")
        return f"{_show(value)} is out of range; write a number {bound} {limit}"
    if kind in {"int_parsing", "int_type", "int_from_float"}:
        return f"{_show(value)} is not a whole number; write an integer such as 8"
    if kind in {"float_parsing", "float_type"}:
        return f"{_show(value)} is not a number; write a number such as 0.5"
    if kind in {"bool_parsing", "bool_type"}:
        return f"{_show(value)} is not a boolean; write true or false"
    if kind in {"string_type"}:
        return f"{_show(value)} is not text; write a string (quote it in YAML if needed)"
    if kind in {"model_type", "model_attributes_type", "dict_type"}:
        return f"expected a mapping of keys, got {_show(value)}"
    if kind in {"tuple_type", "list_type"}:
        return f"expected a list, got {_show(value)}; write e.g. [a, b]"
    if kind == "string_pattern_mismatch":
        return f"{_show(value)} must match {ctx.get('pattern')} (letters, digits, _ . - only)"
    if kind == "string_too_short":
        return f"{_show(value)} is too short; it must not be empty"
    msg = e["msg"].removeprefix("Value error, ")
    return msg if kind == "value_error" else f"{msg} (got {_show(value)})"


def _example(tp: Any) -> str:
    """A YAML value of type `tp` to show after `add key:`: a mapping with the required keys of a model
    (the first kind of a union), a list, or a placeholder naming the type."""
    choices = _model_choices(tp)
    if choices:
        tag, model = next(iter(choices.items()))
        head = [f"{t}: {tag}" for t in ("kind", "backend") if t in model.model_fields]
        needed = [f"{k}: {_example(f.annotation)}" for k, f in model.model_fields.items() if f.is_required()]
        return "{" + ", ".join(head + needed) + "}"
    inner = _unwrap(tp)
    if typing.get_origin(inner) in (list, tuple):
        return f"[{_example(_item_type(inner))}, ...]"
    if typing.get_origin(inner) is typing.Literal:
        return " | ".join(map(str, typing.get_args(inner)))
    return {str: "<text>", int: "<whole number>", float: "<number>", bool: "true"}.get(inner, "<value>")


def _tags_note(field: Any) -> str:
    choices = _model_choices(field.annotation)
    if len(choices) < 2:
        return ""
    tag = "backend" if any("backend" in m.model_fields for m in choices.values()) else "kind"
    return f" ({tag} one of: {', '.join(choices)})"


def _other_kinds_with(path: list, key: str, parent: type[BaseModel] | None) -> list[str]:
    """Tags of the other kinds of a top-level section that have a field named `key`."""
    from pats.spec.models import ExperimentSpec

    field = ExperimentSpec.model_fields.get(str(path[0])) if len(path) == 2 else None
    choices = _model_choices(field.annotation) if field is not None else {}
    return sorted(tag for tag, model in choices.items() if model is not parent and key in model.model_fields)


def _sections_with(key: str) -> list[str]:
    """Dotted paths of the spec sections (any kind of them) that have a field named `key`."""
    from pats.spec.models import ExperimentSpec

    found: list[str] = []

    def walk(model: type[BaseModel], prefix: str, seen: frozenset) -> None:
        if key in model.model_fields:
            found.append(prefix)
        for name, field in model.model_fields.items():
            # The section itself (a model or a union of kinds) or the models a list of it holds.
            subs = {
                *_model_choices(field.annotation).values(),
                *_model_choices(_item_type(field.annotation)).values(),
            }
            for sub in subs - seen:
                walk(sub, f"{prefix}.{name}" if prefix else name, seen | {sub})

    walk(ExperimentSpec, "", frozenset({ExperimentSpec}))
    return sorted(set(found))


def _yaml_path(root: type[BaseModel], loc: tuple) -> tuple[list, type[BaseModel] | None]:
    """Drop the union-tag entries pydantic puts into `loc`; return the path and the model that
    holds its last key (for listing the keys allowed there)."""
    path: list = []
    current: Any = root
    parent: type[BaseModel] | None = root
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        path.append(part)
        if isinstance(current, type) and issubclass(current, BaseModel):
            parent = current
            field = current.model_fields.get(str(part))
            current = field.annotation if field else None
        else:
            current = _item_type(current)
        choices = _model_choices(current)
        if len(choices) > 1 and parts and parts[0] in choices:
            current = choices[parts.pop(0)]
        elif len(choices) == 1:
            current = next(iter(choices.values()))
    if (
        path
        and isinstance(path[-1], str)
        and not (isinstance(current, type) and issubclass(current, BaseModel))
    ):
        return path, parent
    return path, current if isinstance(current, type) and issubclass(current, BaseModel) else parent


def _union_tags(parent: type[BaseModel] | None, key: Any) -> tuple[str, list[str]]:
    """The tag key (`kind` or `backend`) of the union held by `parent.key`, and its tags."""
    field = parent.model_fields.get(str(key)) if parent else None
    choices = _model_choices(field.annotation) if field else {}
    tag = "backend" if any("backend" in m.model_fields for m in choices.values()) else "kind"
    return tag, list(choices) or ["(see docs/specs.md)"]


def _unwrap(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _model_choices(tp: Any) -> dict[str, type[BaseModel]]:
    """Models a field may hold, keyed by their tag (kind/backend default) or class name."""
    tp = _unwrap(tp)
    if tp is None:
        return {}
    args = typing.get_args(tp) if typing.get_origin(tp) in (typing.Union, types.UnionType) else (tp,)
    out: dict[str, type[BaseModel]] = {}
    for arg in args:
        arg = _unwrap(arg)
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            tag_field = arg.model_fields.get("kind") or arg.model_fields.get("backend")
            out[str(tag_field.default) if tag_field else arg.__name__] = arg
    return out


def _item_type(tp: Any) -> Any:
    tp = _unwrap(tp)
    args = [a for a in typing.get_args(tp) if a is not Ellipsis]
    return args[-1] if args else None
