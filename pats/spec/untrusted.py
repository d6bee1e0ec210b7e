"""Checks on untrusted spec input, before anything else reads it: YAML graphs that are cyclic, too
deep or too large once aliases expand; values YAML reads as something a spec cannot hold; `${...}`
interpolations that would expand without bound; values that carry a secret from the environment.
Found by fuzzing the loader (tests/test_spec_fuzz.py); each limit is far above what a real spec uses.
"""

from __future__ import annotations

import datetime
import os
import re
from typing import Any

import yaml

from pats.errors import SpecError, SpecIssue

MAX_DEPTH = 32  # nesting levels in one file (shipped specs use 4)
MAX_NODES = 100_000  # values in one file once its aliases are expanded
MAX_CHARS = 1_000_000  # characters of the resolved spec
MAX_REFERENCE_DEPTH = 50  # nesting plus `${...}` references to values that hold references
_ENV_REFERENCE = re.compile(r"oc\.env:\s*([A-Za-z0-9_]+)")
_REFERENCE = re.compile(r"\$\{\s*(?:oc\.select:\s*)?(\.*)([A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+|\[\d+\])*)")
SECRET_NAME = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)(_|$)", re.I)


def check_shape(node: yaml.Node | None, file: str) -> None:
    """Refuse a YAML graph that is cyclic, too deep or too large once its aliases are expanded."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height) of the expanded subtree
    open_: set[int] = set()

    def refuse(message: str, at: yaml.Node) -> SpecError:
        return SpecError(SpecIssue("", f"line {at.start_mark.line + 1}: {message}", file))

    def walk(n: yaml.Node, depth: int) -> tuple[int, int]:
        if depth > MAX_DEPTH:
            raise refuse(f"nested more than {MAX_DEPTH} levels deep; a spec is a few levels deep", n)
        if id(n) in open_:
            raise refuse(
                "an alias refers to the anchor it is inside, which makes the value endless; "
                "copy the values instead",
                n,
            )
        if id(n) in sizes:
            values, height = sizes[id(n)]
            if depth + height > MAX_DEPTH:
                raise refuse(f"aliases nest values more than {MAX_DEPTH} levels deep", n)
            return values, height
        if isinstance(n, yaml.MappingNode):
            children = [c for pair in n.value for c in pair]
        elif isinstance(n, yaml.SequenceNode):
            children = list(n.value)
        else:
            children = []
        open_.add(id(n))
        values, height = 1, 0
        for child in children:
            v, h = walk(child, depth + 1)
            values, height = values + v, max(height, h + 1)
            if values > MAX_NODES:
                raise refuse(
                    f"aliases expand to more than {MAX_NODES} values; a spec is small, "
                    "so copy values instead of nesting aliases",
                    n,
                )
        open_.discard(id(n))
        sizes[id(n)] = (values, height)
        return values, height

    if node is not None:
        walk(node, 0)


def _yaml_kind(value: Any) -> str:
    """What YAML read `value` as, in the words of a YAML user."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, bytes):
        return "binary data"
    if isinstance(value, datetime.datetime):
        return "a timestamp"
    if isinstance(value, datetime.date):
        return "a date"
    return f"a {type(value).__name__}"


def odd_values(value: Any, path: tuple, key_path: tuple, lines: dict, file: str) -> list[SpecIssue]:
    """Issues for values YAML reads as something a spec cannot hold (dates, sets, binary) and for
    keys that are not names (`null:`, `yes:`, `1.5:`); `key_path` is `path` as the line map keys it."""

    def issue(at: tuple, message: str, line_key: tuple = key_path) -> SpecIssue:
        line = lines.get(line_key)
        return SpecIssue(".".join(map(str, at)), message, f"{file}:{line}" if line else file)

    def raw_key(key: Any) -> tuple:  # the line-map path of a key YAML did not read as text
        for k in lines:
            if len(k) == len(key_path) + 1 and k[:-1] == key_path and isinstance(k[-1], str):
                try:
                    loaded = yaml.safe_load(k[-1])
                    if type(loaded) is type(key) and repr(loaded) == repr(key):  # nan != nan
                        return k
                except yaml.YAMLError:
                    continue
        return key_path

    out: list[SpecIssue] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                out.append(
                    issue(
                        (*path, key),
                        f"YAML reads the key {key!r} as {_yaml_kind(key)}, not a name; quote it "
                        "if it is a name (yes, no, on, off and null are not names unless quoted)",
                        raw_key(key),
                    )
                )
                continue
            out.extend(odd_values(item, (*path, key), (*key_path, str(key)), lines, file))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(odd_values(item, (*path, i), (*key_path, i), lines, file))
    elif not isinstance(value, (str, int, float, bool, type(None))):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        out.append(
            issue(
                path,
                f"YAML reads this as {_yaml_kind(value)} ({shown}); a spec holds text, numbers, "
                "booleans, lists and mappings: quote it to keep it as text",
            )
        )
    return out


def resolved_size(merged: dict) -> int:
    """An upper bound on the characters of `merged` once its `${...}` are resolved, without resolving
    them: each reference to another value counts that value's size again."""
    sizes: dict[tuple, int] = {}

    def node(path: tuple) -> Any:
        value: Any = merged
        for part in path:
            if isinstance(value, dict) and (part in value or str(part) in value):
                value = value[part] if part in value else value[str(part)]
            elif isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
                value = value[part]
            else:
                raise KeyError(path)
        return value

    def size(path: tuple, depth: int) -> int:
        if path in sizes:
            return sizes[path]
        if depth > MAX_REFERENCE_DEPTH:  # nesting plus references to references
            raise SpecError(
                SpecIssue(
                    ".".join(map(str, path)),
                    f"interpolations refer to values that refer on, more than {MAX_REFERENCE_DEPTH} "
                    "levels deep; refer to the final value directly",
                )
            )
        sizes[path] = 0  # a cycle counts once; OmegaConf reports it when resolving
        value = node(path)
        if isinstance(value, dict):
            total = sum(len(str(k)) + size((*path, k), depth + 1) for k in value)
        elif isinstance(value, list):
            total = sum(size((*path, i), depth + 1) for i in range(len(value)))
        elif isinstance(value, str):
            total = len(value) + sum(len(os.environ.get(name, "")) for name in _ENV_REFERENCE.findall(value))
            for dots, ref in _REFERENCE.findall(value):
                parts = [int(p) if p.isdigit() else p for p in re.split(r"\.|\[|\]", ref) if p]
                base = path[: max(len(path) - len(dots), 0)] if dots else ()
                try:
                    total += size((*base, *parts), depth + 1)
                except KeyError:
                    pass  # not a reference to a value here; OmegaConf reports it when resolving
                if total > MAX_CHARS:
                    break
        else:
            total = len(str(value))
        sizes[path] = total
        return total

    return size((), 0)


def secret_leaks(value: Any, path: tuple) -> list[SpecIssue]:
    """Values that hold the value of a secret-looking environment variable, or of one that an
    `api_key_env` names (the issues name the variable, never the value)."""
    named = set(_values_of("api_key_env", value))
    secrets = {
        name: v
        for name, v in os.environ.items()
        if len(v) >= 8 and (name in named or SECRET_NAME.search(name))
    }
    if not secrets:
        return []
    out: list[SpecIssue] = []

    def walk(v: Any, at: tuple) -> None:
        if isinstance(v, dict):
            for key, item in v.items():
                walk(key, at)
                walk(item, (*at, key))
        elif isinstance(v, list):
            for i, item in enumerate(v):
                walk(item, (*at, i))
        elif isinstance(v, str):
            for name in (n for n, secret in secrets.items() if secret in v):
                out.append(
                    SpecIssue(
                        ".".join(map(str, at)),
                        f"holds the value of the environment variable {name}, which looks like a "
                        "secret; the resolved spec is written to spec.yaml and the W&B config, so "
                        "never put keys into it: name the variable in llm.api_key_env instead",
                    )
                )

    walk(value, path)
    return sorted(set(out), key=lambda i: (i.path, i.message))


def _values_of(key: str, value: Any) -> list[str]:
    """Every text value stored under `key`, at any depth."""
    if isinstance(value, dict):
        found = [v for k, v in value.items() if k == key and isinstance(v, str)]
        return found + [x for v in value.values() for x in _values_of(key, v)]
    if isinstance(value, list):
        return [x for v in value for x in _values_of(key, v)]
    return []
