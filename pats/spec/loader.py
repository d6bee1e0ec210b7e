"""Load a spec in one direction: YAML -> `defaults:` bases -> `${...}` -> CLI overrides -> validate.

Nothing here returns an OmegaConf object: the output is a frozen `ExperimentSpec`, or a `SpecError`
listing every problem with its YAML path and where it came from (file and line, or the override).

Merging is a plain deep merge of mappings, with one rule OmegaConf's merge lacks: when a section's
kind changes (`reviser: {kind: rules}` over a base with `kind: llm`), the section is replaced, not
merged, so the old kind's keys do not linger. YAML is read with `yaml.safe_load` only: a spec is data
and cannot construct Python objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from pats.errors import SpecError, SpecIssue
from pats.spec.issues import issues_from_validation
from pats.spec.models import ExperimentSpec

TAG_KEYS = ("kind", "backend")  # keys whose change replaces a whole section


class _Layer:
    """One source of settings (a file or the overrides) and where each of its keys was written."""

    def __init__(
        self,
        name: str,
        data: dict,
        lines: dict[tuple, int] | None = None,
        overrides: dict[tuple, str] | None = None,
    ):
        self.name, self.data, self.lines = name, data, lines or {}
        self.overrides = overrides or {}  # dotted key -> the override text that set it

    def where(self, path: tuple) -> str:
        line = self.lines.get(path)
        return f"{self.name}:{line}" if line else self.name


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentSpec:
    """Load, merge, interpolate, override and validate one spec file."""
    path = Path(path)
    layers = _file_layers(path, chain=())
    if overrides:
        layers.append(_override_layer(overrides))
    merged: dict = {}
    origin: dict[tuple, _Layer] = {}
    for layer in layers:
        merged = _merge(merged, layer.data, (), origin, layer)
    resolved = _resolve(merged, str(path))
    try:
        return ExperimentSpec.model_validate(resolved)
    except ValidationError as err:
        issues = issues_from_validation(err, resolved)
        raise SpecError([_with_source(i, origin) for i in issues], file=str(path)) from None


def spec_to_yaml(spec: ExperimentSpec) -> str:
    """The resolved spec as YAML; loading it back gives an equal spec."""
    return yaml.safe_dump(_tags_first(spec.model_dump(mode="json")), sort_keys=False, width=100)


def _tags_first(value: Any) -> Any:
    """Put `kind`/`backend` at the top of each section, where a reader looks for them."""
    if isinstance(value, dict):
        head = {k: value[k] for k in TAG_KEYS if k in value}
        return {**head, **{k: _tags_first(v) for k, v in value.items() if k not in head}}
    if isinstance(value, list):
        return [_tags_first(v) for v in value]
    return value


# -- files and `defaults:` ---------------------------------------------------------------------


def _file_layers(path: Path, chain: tuple[Path, ...]) -> list[_Layer]:
    """The layers of `path`: its bases first (in the order listed), then the file itself."""
    resolved = path.resolve()
    if resolved in chain:
        cycle = " -> ".join(str(p) for p in (*chain, resolved))
        raise SpecError(SpecIssue("defaults", f"cyclic defaults: {cycle}; remove one of these references"))
    data, lines = _read_yaml(path)
    bases = data.pop("defaults", [])
    if isinstance(bases, str):
        bases = [bases]
    if not isinstance(bases, list) or not all(isinstance(b, str) for b in bases):
        raise SpecError(
            SpecIssue(
                "defaults",
                "must be a list of spec file paths, e.g. defaults: [../quickstart.yaml]",
                str(path),
            )
        )
    layers: list[_Layer] = []
    for i, base in enumerate(bases):
        base_path = path.parent / base
        if not base_path.is_file():
            raise SpecError(
                SpecIssue(
                    f"defaults.{i}",
                    f"base spec '{base}' not found (looked for {base_path}); paths in defaults are "
                    "relative to the file that lists them",
                    str(path),
                )
            )
        layers.extend(_file_layers(base_path, (*chain, resolved)))
    layers.append(_Layer(str(path), data, lines))
    return layers


def _read_yaml(path: Path) -> tuple[dict, dict[tuple, int]]:
    if not path.is_file():
        raise SpecError(SpecIssue("", f"spec file not found: {path}"))
    text = path.read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        line = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        raise SpecError(
            SpecIssue("", f"YAML syntax error at {line}: {err.problem}; fix the YAML there", str(path))
        ) from None
    except yaml.YAMLError as err:
        raise SpecError(SpecIssue("", f"cannot read YAML: {err}", str(path))) from None
    if data is None:
        raise SpecError(
            SpecIssue(
                "", "the file is empty; a spec needs at least name: and environment: {kind: ...}", str(path)
            )
        )
    if not isinstance(data, dict):
        raise SpecError(
            SpecIssue(
                "",
                f"the top level is a {type(data).__name__}, not a mapping; write keys such as "
                "name:, environment:, trainer: at the top level",
                str(path),
            )
        )
    return data, _line_numbers(node)


def _line_numbers(node, prefix: tuple = ()) -> dict[tuple, int]:
    lines: dict[tuple, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, key_node.value)
            lines[path] = key_node.start_mark.line + 1
            lines.update(_line_numbers(value_node, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*prefix, i)] = item.start_mark.line + 1
            lines.update(_line_numbers(item, (*prefix, i)))
    return lines


# -- overrides, merge, interpolation -----------------------------------------------------------


def _override_layer(overrides: Sequence[str]) -> _Layer:
    bad = [o for o in overrides if "=" not in o or not o.split("=", 1)[0].strip()]
    if bad:
        raise SpecError(
            [SpecIssue("", f"override '{o}' is not key=value; write e.g. trainer.steps=10") for o in bad]
        )
    try:
        data = OmegaConf.to_container(OmegaConf.from_dotlist(list(overrides)), resolve=False)
    except OmegaConfBaseException as err:
        raise SpecError(SpecIssue("", f"cannot parse overrides {list(overrides)}: {err}")) from None
    return _Layer("override", data, overrides={tuple(o.split("=", 1)[0].split(".")): o for o in overrides})


def _merge(base: Any, over: Any, path: tuple, origin: dict, layer: _Layer) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        if any(k in over and k in base and over[k] != base[k] for k in TAG_KEYS):
            base = {}  # a different kind: replace the section instead of mixing two kinds' keys
        out = dict(base)
        for key, value in over.items():
            out[key] = _merge(base.get(key), value, (*path, key), origin, layer)
        origin[path] = origin.get(path, layer)
        return out
    origin[path] = layer
    if isinstance(over, dict):
        for key, value in over.items():
            _merge(None, value, (*path, key), origin, layer)
    return over


def _resolve(merged: dict, file: str) -> dict:
    try:
        return OmegaConf.to_container(OmegaConf.create(merged), resolve=True)  # type: ignore[return-value]
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", "") or ""
        msg = str(err).splitlines()[0]
        raise SpecError(SpecIssue(key, f"cannot resolve interpolation: {msg}"), file=file) from None


def _with_source(issue: SpecIssue, origin: dict[tuple, _Layer]) -> SpecIssue:
    parts = tuple(int(p) if p.isdigit() else p for p in issue.path.split(".")) if issue.path else ()
    for n in range(len(parts), -1, -1):
        layer = origin.get(parts[:n])
        if layer is None:
            continue
        if layer.overrides:
            keys = tuple(map(str, parts))
            text = next((v for k, v in layer.overrides.items() if _prefix(k, keys) or _prefix(keys, k)), None)
            return SpecIssue(issue.path, issue.message, f"override '{text}'" if text else "overrides")
        return SpecIssue(issue.path, issue.message, layer.where(parts[:n]))
    return issue


def _prefix(short: tuple, long: tuple) -> bool:
    return len(short) <= len(long) and long[: len(short)] == short
