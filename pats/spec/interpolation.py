"""`${...}` in specs: the `data:` resolver, and every interpolation that does not resolve.

`${data:PATH}` is PATH under the data root ($PATS_DATA, else ~/.cache/pats/data; `pats.places`), where
`pats data fetch` puts the data sets the shipped specs read. OmegaConf stops at the first value it
cannot resolve; `interpolation_issues` finds them all, each at its own YAML path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from pats.errors import SpecIssue
from pats.places import data_root

# OmegaConf 2.4 deprecates register_new_resolver (a warning on every import) for register_resolver,
# which in 2.3 is an older API without `replace`: the signature tells the two apart.
_register: Callable[..., None] = (
    OmegaConf.register_resolver
    if "replace" in inspect.signature(OmegaConf.register_resolver).parameters
    else OmegaConf.register_new_resolver
)
_register(  # process-wide: OmegaConf has no scoped resolvers
    "data", lambda relative="": str(data_root() / str(relative)), replace=True
)


INTERPOLATION_HINT = (
    "write ${section.key} for another value of the spec, ${oc.env:NAME,default} for an environment "
    "variable, or ${data:PATH} for a file under the data root"
)


def interpolation_issues(merged: dict) -> list[SpecIssue]:
    """Every value whose `${...}` does not resolve, not only the first one OmegaConf meets."""
    try:
        cfg: Any = OmegaConf.create(merged)
    except OmegaConfBaseException:  # a malformed `${`: find each such value on its own
        cfg = None
    issues = []
    for path, value in _leaves(merged, ()):
        if not (isinstance(value, str) and "${" in value):
            continue
        node: Any = cfg
        try:
            if cfg is None:
                OmegaConf.create({"value": value})  # parses the interpolation, resolves nothing
            for part in path if cfg is not None else ():
                node = node[part]  # reading a value resolves it
        except RecursionError:
            issues.append(
                SpecIssue(".".join(map(str, path)), "interpolations refer to values that refer on too deeply")
            )
        except OmegaConfBaseException as err:
            issues.append(
                SpecIssue(
                    ".".join(map(str, path)),
                    f"cannot resolve {_short(value)}: {_first_line(err)}; {INTERPOLATION_HINT}",
                )
            )
    return issues


def _leaves(value: Any, path: tuple) -> Iterator[tuple[tuple, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _leaves(item, (*path, i))
    else:
        yield path, value


def _short(value: str) -> str:
    return value if len(value) <= 30 else value[:27] + "..."


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
