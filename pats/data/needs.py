"""`pats data list`: what each spec reads from the data root, which data set holds it, and whether it is there.

A spec names its data as `${data:<path>}` (the data root, see `pats.places.data_root`); after loading,
every value of the spec under the data root is a need. ALFWorld specs without `environment.data_dir`
read `$ALFWORLD_DATA` instead, which is reported as such.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from pathlib import Path

from pats.data.catalog import DATASETS, dataset_of
from pats.data.fetch import present
from pats.errors import PatsError
from pats.places import data_root


@dataclass(frozen=True)
class Need:
    path: str  # under the data root, or an absolute path outside it ($ALFWORLD_DATA)
    dataset: str | None  # the data set that holds it; None when `pats data fetch` cannot get it
    found: bool


def shipped_specs() -> list[Path]:
    """experiments/**/*.yaml of the working directory, else of the checkout pats runs from."""
    for folder in (Path("experiments"), Path(__file__).resolve().parents[2] / "experiments"):
        specs = sorted(folder.rglob("*.yaml"))
        if specs:
            return specs
    return []


def spec_needs(path: Path, root: Path) -> list[Need]:
    """The data one spec reads: values under `root`, and $ALFWORLD_DATA for ALFWorld without data_dir."""
    from pats.spec import load_spec

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # notices about the spec belong to `pats validate`
        spec = load_spec(path)
    found = {_relative(v, root) for v in _strings(spec.model_dump(mode="json"))}
    needs = [_need(rel, root) for rel in sorted(r for r in found if r is not None)]
    if spec.environment.kind == "alfworld" and not getattr(spec.environment, "data_dir", None):
        games = os.environ.get("ALFWORLD_DATA", "")
        hint = "" if games else ": run alfworld-download, or add environment.data_dir='${data:alfworld}'"
        needs.append(
            Need(f"$ALFWORLD_DATA ({games or 'unset'}){hint}", None, bool(games) and Path(games).exists())
        )
    return needs


def _need(rel: str, root: Path) -> Need:
    """A file is found when it is there; a folder (alfworld/) when its data set is there too."""
    dataset = dataset_of(rel)
    path = root / rel
    found = path.is_file() or (
        path.is_dir() and (dataset is None or all(ok for _, ok in present(dataset, root)))
    )
    return Need(rel, dataset.name if dataset else None, found)


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _relative(value: str, root: Path) -> str | None:
    prefix = str(root).rstrip("/") + "/"
    return value[len(prefix) :] if value.startswith(prefix) else None


def list_text(specs: list[Path]) -> str:
    """The text `pats data list` prints."""
    root = data_root()
    where = "$PATS_DATA" if os.environ.get("PATS_DATA") else "$PATS_DATA unset: the default"
    lines = [f"data root: {root} ({where})", "data sets:"]
    for d in DATASETS:
        found = all(ok for _, ok in present(d, root))
        lines.append(f"  {d.name:<10} {d.size / 1e6:6.1f} MB  {'found  ' if found else 'missing'}  {d.about}")
    lines.append("specs:")
    missing: set[str] = set()
    width = max((len(str(s)) for s in specs), default=0)
    for spec in specs:
        try:
            needs = spec_needs(spec, root)
        except PatsError as err:
            lines.append(f"  {str(spec):<{width}}  cannot load: {str(err).splitlines()[0]}")
            continue
        if not needs:
            lines.append(f"  {str(spec):<{width}}  no data to fetch")
        for i, need in enumerate(needs):
            head = str(spec) if i == 0 else ""
            state = "found" if need.found else "missing"
            lines.append(f"  {head:<{width}}  {need.dataset or '-':<10} {state:<7}  {need.path}")
            if not need.found and need.dataset:
                missing.add(need.dataset)
    if missing:
        lines.append(f"fetch what is missing: pats data fetch {' '.join(sorted(missing))}")
    return "\n".join(lines)
