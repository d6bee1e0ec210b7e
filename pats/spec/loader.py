"""Load a spec in one direction: YAML -> `defaults:` bases -> `${...}` -> CLI overrides -> validate.

Nothing here returns an OmegaConf object: the output is a frozen `ExperimentSpec`, or a `SpecError`
listing every problem with its YAML path and where it came from (file and line, or the override).

Merging is a plain deep merge of mappings, with one rule OmegaConf's merge lacks: when a section's
kind changes (`reviser: {kind: rules}` over a base with `kind: llm`), the section is replaced, not
merged, so the old kind's keys do not linger. YAML is read with `yaml.safe_load` only: a spec is data
and cannot construct Python objects.

A spec is also treated as untrusted input: it must be UTF-8 text whose values are plain (text,
numbers, booleans, null, lists, mappings; no dates or sets), aliases may not make it cyclic, deeper
than `MAX_DEPTH` or larger than `MAX_NODES` once expanded, `defaults:` may pull in at most
`MAX_FILES` files, and no resolved value may hold the value of an environment variable that looks
like a secret (`${oc.env:OPENAI_API_KEY}` would copy the key into spec.yaml and the W&B config).

`${data:<path>}` is a path under the data root ($PATS_DATA, else ~/.cache/pats/data: see
pats.spec.interpolation), where `pats data fetch` puts the data sets the shipped specs read.

Files a spec reads (`FILE_KEYS`) are read relative to the spec file that names them, as `defaults:`
are, or to the working directory when an override names them, and the loaded spec holds them as
absolute paths: a run directory's spec.yaml, `--resume` and `pats export` find the same file from any
directory. (Outputs such as `logging.root` stay relative to where `pats run` is started.)

Length (over 450 lines, on purpose): one pipeline, in the order it runs (files, merge,
interpolation, overrides, paths, validation); its steps share the origin map that gives every problem
its file and line. The untrusted-input limits are apart, in untrusted.py.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from pydantic import ValidationError

from pats.errors import SpecError, SpecIssue, SpecNotice
from pats.places import data_root
from pats.spec.interpolation import interpolation_issues
from pats.spec.issues import issues_from_validation
from pats.spec.models import ExperimentSpec
from pats.spec.untrusted import MAX_CHARS, MAX_DEPTH, check_shape, odd_values, resolved_size, secret_leaks

TAG_KEYS = ("kind", "backend")  # keys whose change replaces a whole section
FILE_KEYS = tuple(  # values that name files (or folders) a run reads
    tuple(key.split("."))
    for key in (
        "scaffold.initial_bank", "judge.rubric", "environment.data_dir", "environment.catalog",
        "environment.attributes", "environment.instructions", "environment.train_data",
        "environment.eval_data", "environment.retriever.corpus", "policy.init_adapter", "reviser.program",
        "warm_start.environment.data_dir", "warm_start.environment.catalog",
        "warm_start.environment.attributes", "warm_start.environment.instructions",
        "warm_start.environment.train_data", "warm_start.environment.eval_data",
        "warm_start.environment.retriever.corpus",
    )
)  # fmt: skip
# Keys that moved, old path -> new path: a spec (or a run directory's spec.yaml) written before the move
# still loads; the value goes to the new place with a notice, or is dropped where nothing reads it.
MOVED_KEYS = {
    ("policy", "max_prompt_tokens"): ("trainer", "max_prompt_tokens"),  # verl's data lengths (issue 16)
    ("policy", "max_response_tokens"): ("trainer", "max_response_tokens"),
}
MAX_FILES = 64  # files a spec may pull in through `defaults:`, counting repeats
# `${a.b}`, `${.a}`, `${..a[0]}` and `${oc.select:a.b}`: references to other values of the spec.
# Environment variables whose values must never end up in a spec (names like OPENAI_API_KEY, HF_TOKEN).


class _Layer:
    """One source of settings (a file or the overrides) and where each of its keys was written."""

    def __init__(
        self,
        name: str,
        data: dict,
        lines: dict[tuple, int] | None = None,
        overrides: dict[tuple, str] | None = None,
        directory: Path | None = None,
    ):
        self.name, self.data, self.lines = name, data, lines or {}
        self.overrides = overrides or {}  # dotted key -> the override text that set it
        self.directory = directory or Path.cwd()  # what relative file paths written here are read against

    def where(self, path: tuple) -> str:
        line = self.lines.get(path)
        return f"{self.name}:{line}" if line else self.name


def load_spec(path: str | Path, overrides: Sequence[str] = ()) -> ExperimentSpec:
    """Load, merge, interpolate, override and validate one spec file."""
    return load_spec_sourced(path, overrides)[0]


def load_spec_sourced(
    path: str | Path, overrides: Sequence[str] = ()
) -> tuple[ExperimentSpec, dict[str, str]]:
    """`load_spec`, and where each file the spec reads was named (`scaffold.initial_bank` -> 'a.yaml:8'),
    for `missing_files` to point at the line."""
    path = Path(path)
    layers = _file_layers(path, chain=())
    if overrides:
        layers.append(_override_layer(overrides))
    merged: dict = {}
    origin: dict[tuple, _Layer] = {}
    for layer in layers:
        merged = _merge(merged, layer.data, (), origin, layer)
    resolved = _anchor_files(_move_keys(_resolve(merged, str(path), origin), origin), origin)
    leaks = secret_leaks(resolved, ())
    if leaks:  # before validation: its messages would quote the value
        raise SpecError([_with_source(i, origin) for i in leaks], file=str(path))
    sources = {
        where: _with_source(SpecIssue(where, ""), origin).source
        for key, parent in _file_slots(resolved)
        for where in _file_paths(key, parent[key[-1]])
    }
    try:
        return ExperimentSpec.model_validate(resolved), sources
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


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError):  # e.g. a name too long for the file system
        return False


def _file_layers(path: Path, chain: tuple[Path, ...], count: list[int] | None = None) -> list[_Layer]:
    """The layers of `path`: its bases first (in the order listed), then the file itself."""
    count = count if count is not None else [0]
    count[0] += 1
    if count[0] > MAX_FILES:
        raise SpecError(
            SpecIssue(
                "defaults",
                f"the defaults chain pulls in more than {MAX_FILES} files; list each base once",
                str(path),
            )
        )
    resolved = path.resolve()
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
        line = lines.get(("defaults", i)) or lines.get(("defaults",))
        where = f"{path}:{line}" if line else str(path)
        if not _is_file(base_path):
            raise SpecError(
                SpecIssue(
                    f"defaults.{i}",
                    f"base spec '{base}' not found (looked for {base_path}); paths in defaults are "
                    "relative to the file that lists them",
                    where,
                )
            )
        if base_path.resolve() in (*chain, resolved):
            cycle = " -> ".join(str(p) for p in (*chain, resolved, base_path.resolve()))
            raise SpecError(
                SpecIssue(f"defaults.{i}", f"cyclic defaults: {cycle}; remove '{base}' here", where)
            )
        layers.extend(_file_layers(base_path, (*chain, resolved), count))
    layers.append(_Layer(str(path), data, lines, directory=path.parent))
    return layers


def _read_yaml(path: Path) -> tuple[dict, dict[tuple, int]]:
    if not _is_file(path):
        raise SpecError(SpecIssue("", f"spec file not found: {path}"))
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise SpecError(SpecIssue("", f"cannot read the file: {err.strerror}", str(path))) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise SpecError(
            SpecIssue(
                "",
                f"not UTF-8 text (byte 0x{raw[err.start]:02x} on line {line}); save the file as UTF-8",
                str(path),
            )
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        check_shape(node, str(path))  # before anything walks the data: aliases can make it huge
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown line"
        raise SpecError(
            SpecIssue("", f"YAML syntax error at {where}: {err.problem}; fix the YAML there", str(path))
        ) from None
    except yaml.YAMLError as err:
        raise SpecError(SpecIssue("", f"cannot read YAML: {err}", str(path))) from None
    except RecursionError:
        raise SpecError(
            SpecIssue("", f"nested more than {MAX_DEPTH} levels deep; a spec is a few levels deep", str(path))
        ) from None
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
    lines = _line_numbers(node)
    odd = odd_values(data, (), (), lines, str(path))
    if odd:
        raise SpecError(odd, file=str(path))
    return data, lines


def _line_numbers(node, prefix: tuple = ()) -> dict[tuple, int]:
    lines: dict[tuple, int] = {}
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            path = (*prefix, key_node.value)
            lines[path] = key_node.start_mark.line + 1
            lines.update(_line_numbers(value_node, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            path = (
                *prefix,
                i,
            )  # named: mypy (target 3.10) takes lines[(*prefix, i)] for a 3.11 starred subscript
            lines[path] = item.start_mark.line + 1
            lines.update(_line_numbers(item, path))
    return lines


# -- overrides, merge, interpolation -----------------------------------------------------------


def _override_layer(overrides: Sequence[str]) -> _Layer:
    """`a.b=c` overrides as one layer; later ones win, as in OmegaConf's dotlist.

    Keys are split on dots here (OmegaConf's key grammar with brackets and escapes crashes on some
    input, e.g. `[=`); each value is read as YAML by OmegaConf, so `1e-5` is a number."""
    data: dict = {}
    sources: dict[tuple, str] = {}
    issues: list[SpecIssue] = []
    for text in overrides:
        key, value = text.split("=", 1) if "=" in text else ("", "")
        parts = tuple(part.strip() for part in key.split("."))
        if not key.strip():
            issues.append(SpecIssue("", f"override '{text}' is not key=value; write e.g. trainer.steps=10"))
            continue
        if not all(parts):
            issues.append(
                SpecIssue(
                    key,
                    "the key has an empty part between dots; write dotted keys such as trainer.steps",
                    _override_source(text),
                )
            )
            continue
        try:
            parsed = _override_value(value, text, parts)
        except SpecError as err:
            issues.extend(err.issues)
            continue
        node = data
        for part in parts[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[parts[-1]] = parsed
        # kept in the order they were last set, so the last one a problem's key matches set the value
        sources.pop(parts, None)
        sources[parts] = text
    if issues:
        raise SpecError(issues)
    return _Layer("override", data, overrides=sources)


def _override_value(value: str, text: str, key: tuple) -> Any:
    """One override's value read as YAML, the way OmegaConf reads a dotlist value."""
    source = _override_source(text)
    try:
        check_shape(yaml.compose(value, Loader=yaml.SafeLoader), source)  # aliases, nesting
        container = OmegaConf.to_container(OmegaConf.from_dotlist(["v=" + value]), resolve=False)
        assert isinstance(container, dict), "a dotlist makes a mapping"
        parsed = container["v"]
    except SpecError as err:
        raise SpecError([SpecIssue(".".join(key), i.message, i.source) for i in err.issues]) from None
    except RecursionError:
        raise SpecError(
            SpecIssue(".".join(key), f"nested more than {MAX_DEPTH} levels deep", source)
        ) from None
    except (OmegaConfBaseException, yaml.YAMLError) as err:
        raise SpecError(
            SpecIssue(
                ".".join(key),
                f"cannot read the value ({_first_line(err)}); quote text in YAML and the shell, "
                "e.g. name=\"'my run'\"",
                source,
            )
        ) from None
    odd = odd_values(parsed, key, key, {}, source)
    if odd:
        raise SpecError(odd)
    return parsed


def _override_source(text: str) -> str:
    return f"override '{text if len(text) <= 80 else text[:77] + '...'}'"


def _first_line(err: Exception) -> str:
    """An error's message in one line (a YAML error's problem, without its position)."""
    text = str(getattr(err, "problem", None) or err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _merge(base: Any, over: Any, path: tuple, origin: dict, layer: _Layer) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        changed = [k for k in TAG_KEYS if k in over and k in base and over[k] != base[k]]
        if changed:  # a different kind: replace the section instead of mixing two kinds' keys
            _announce_reset(path, changed[0], base, over, layer)
            base = {}
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


def _announce_reset(path: tuple, tag: str, base: dict, over: dict, layer: _Layer) -> None:
    """Say which settings a kind change drops: they return to the new kind's defaults, silently
    otherwise (`pats show experiments/alfworld/pats.yaml trainer.backend=local` resets steps 150)."""
    dropped = [f"{k}={_short(v)}" for k, v in base.items() if k not in over and k not in TAG_KEYS]
    if dropped:
        section = ".".join(map(str, path)) or "the spec"
        warnings.warn(
            f"{section}: {tag} {base[tag]} -> {over[tag]} ({layer.name}) replaces the section, so these "
            f"settings are dropped and the defaults of {tag} {over[tag]} apply: {', '.join(dropped)}. Set them "
            "again after the change to keep them.",
            SpecNotice,
            stacklevel=2,
        )


def _move_keys(resolved: dict, origin: dict[tuple, _Layer]) -> dict:
    """Apply MOVED_KEYS: on the verl backend the value moves (unless the new place is set); elsewhere the
    new key does not exist, so the old one is dropped. Either way a notice says what to write."""
    for old, new in MOVED_KEYS.items():
        section = resolved.get(old[0])
        if not isinstance(section, dict) or old[1] not in section:
            continue
        value = section.pop(old[1])
        layer = origin.get(old)
        where = f" ({layer.where(old)})" if layer else ""
        target = resolved.setdefault(new[0], {})
        if isinstance(target, dict) and target.get("backend") == "verl" and new[1] not in target:
            target[new[1]] = value
            if layer:  # errors about the moved value point at the line that wrote it
                origin[new] = layer
            what = f"moved there; write {'.'.join(new)}: {_short(value)} instead"
        else:
            what = "only the verl backend reads it, so it is dropped; remove it"
        warnings.warn(f"{'.'.join(old)}{where} is now {'.'.join(new)}: {what}", SpecNotice, stacklevel=3)
    return resolved


def _short(value: Any) -> str:
    text = str(value)
    return text if len(text) <= 30 else text[:27] + "..."


def _resolve(merged: dict, file: str, origin: dict[tuple, _Layer]) -> dict:
    try:
        size = resolved_size(merged)
    except SpecError as err:
        raise SpecError(err.issues, file=file) from None
    if size > MAX_CHARS:  # `a: ${b}${b}`, `b: ${c}${c}`, ...: doubles per level
        raise SpecError(
            SpecIssue(
                "",
                f"interpolations would expand the spec to more than {MAX_CHARS} characters; "
                "a value that refers to others which refer to others again multiplies in size",
            ),
            file=file,
        )
    try:  # (ignore: typed as any container; a mapping's is a dict)
        return OmegaConf.to_container(OmegaConf.create(merged), resolve=True)  # type: ignore[return-value]
    except RecursionError:
        raise SpecError(
            SpecIssue("", "interpolations refer to values that refer on too deeply"), file=file
        ) from None
    except OmegaConfBaseException as err:
        issues = interpolation_issues(merged) or [
            SpecIssue(getattr(err, "full_key", "") or "", f"cannot resolve interpolation: {_first_line(err)}")
        ]
        raise SpecError([_with_source(i, origin) for i in issues], file=file) from None


def _file_slots(data: dict) -> Iterator[tuple[tuple, dict]]:
    """(key, the mapping that holds key[-1]) for each `FILE_KEYS` entry present in `data`."""
    for key in FILE_KEYS:
        parent: Any = data
        for part in key[:-1]:
            parent = parent.get(part) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and parent.get(key[-1]) is not None:
            yield key, parent


def _anchor_files(resolved: dict, origin: dict[tuple, _Layer]) -> dict:
    """`FILE_KEYS` made absolute against the directory of the layer that set them (see the module doc)."""
    for key, parent in _file_slots(resolved):
        value = parent[key[-1]]
        if isinstance(value, str):
            parent[key[-1]] = _absolute(value, origin.get(key))
        elif isinstance(value, list):
            parent[key[-1]] = [
                _absolute(v, origin.get((*key, i)) or origin.get(key)) if isinstance(v, str) else v
                for i, v in enumerate(value)
            ]
    return resolved


def _file_paths(key: tuple, value: Any) -> list[str]:
    """The dotted paths of one `FILE_KEYS` value: the key, or key.<i> for each item of a list."""
    dotted = ".".join(key)
    return [f"{dotted}.{i}" for i in range(len(value))] if isinstance(value, list) else [dotted]


def missing_files(spec: ExperimentSpec, sources: dict[str, str] | None = None) -> list[SpecIssue]:
    """One issue per `FILE_KEYS` value that names no existing file or folder (`pats validate`, and
    `pats run` before it loads a model); `sources` (from `load_spec_sourced`) adds file and line."""
    issues = []
    for key, parent in _file_slots(spec.model_dump(mode="json")):
        value = parent[key[-1]]
        values = [value] if isinstance(value, str) else list(value)
        for where, path in zip(_file_paths(key, value), values, strict=True):
            if not Path(path).exists():
                issues.append(
                    SpecIssue(
                        where, f"{path} does not exist; {_missing_hint(path)}", (sources or {}).get(where, "")
                    )
                )
    return issues


def _missing_hint(path: str) -> str:
    root = data_root()
    if path.startswith(str(root) + os.sep):
        return (
            f"it is under the data root {root} ($PATS_DATA, default ~/.cache/pats/data): `pats data list` "
            "says which data set holds it, `pats data fetch NAME` gets it"
        )
    return (
        "a relative path is read from the folder of the spec file that names it (or the working "
        "directory, in an override)"
    )


def _absolute(value: str, layer: _Layer | None) -> str:
    if not value.strip():
        return value  # validation says what is wrong with an empty path
    path = Path(value).expanduser()
    if not path.is_absolute() and layer is not None:
        path = layer.directory / path
    return os.path.normpath(path.absolute())


def _with_source(issue: SpecIssue, origin: dict[tuple, _Layer]) -> SpecIssue:
    parts = (
        tuple(int(p) if p.isascii() and p.isdigit() else p for p in issue.path.split("."))
        if issue.path
        else ()
    )
    for n in range(len(parts), -1, -1):
        layer = origin.get(parts[:n])
        if layer is None:
            continue
        if layer.overrides:
            keys = tuple(map(str, parts))
            matching = (
                v for k, v in reversed(layer.overrides.items()) if _prefix(k, keys) or _prefix(keys, k)
            )
            text = next(matching, None)
            return SpecIssue(issue.path, issue.message, _override_source(text) if text else "overrides")
        return SpecIssue(issue.path, issue.message, layer.where(parts[:n]))
    return issue


def _prefix(short: tuple, long: tuple) -> bool:
    return len(short) <= len(long) and long[: len(short)] == short
