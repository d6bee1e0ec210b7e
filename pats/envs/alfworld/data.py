"""Finding ALFWorld's game files: $ALFWORLD_DATA, a folder, or tarballs unpacked once to a cache.

The layout is the one `alfworld-download` writes: `<root>/json_2.1.1/<split>/<task dir>/<trial>/
game.tw-pddl`, where the task dir starts with the task type (`pick_clean_then_place_in_recep-Mug-
None-CoffeeMachine-10`). A tarball of that tree (`json_2.1.1_*.tar.xz`, as `pats data fetch alfworld` gets)
is unpacked to `$PATS_CACHE/alfworld/<name>-<size>/`; a folder of tarballs is searched smallest first,
so a run that needs only valid_seen never unpacks the 330 MB training set.

As in alfworld's own AlfredTWEnv, games under a `movable` or `Sliced` directory are skipped (the
published task sets leave them out). Unlike it, a game needs no traj_data.json beside it, and the
`solvable` flag is not read (every game of the released json_2.1.1 sets it; reading 3,553 files to
check would add seconds to every start).
"""

from __future__ import annotations

import os
import random
import shutil
import tarfile
import tempfile
from pathlib import Path

from pats.errors import PrerequisiteError
from pats.models.files import cache_dir
from pats.spec.environments import ALFWORLD_TASK_TYPES

GAMES_DIR = "json_2.1.1"
GAME_FILE = "game.tw-pddl"
TARBALLS = ("*.tar.xz", "*.tar.gz", "*.tgz", "*.tar")
INSTALL_HINT = (
    "set environment.data_dir or $ALFWORLD_DATA to ALFWorld's data: run `alfworld-download` on a machine "
    "with internet (it fills $ALFWORLD_DATA, default ~/.cache/alfworld), or point data_dir at a "
    "json_2.1.1_*.tar.xz tarball or a folder of them, such as ${data:alfworld} after `pats data fetch alfworld`"
)


def data_source(data_dir: str | None) -> Path:
    """The spec's data_dir, else $ALFWORLD_DATA; a clear error when neither names an existing path."""
    raw, origin = (
        (data_dir, "environment.data_dir")
        if data_dir
        else (os.environ.get("ALFWORLD_DATA"), "$ALFWORLD_DATA")
    )
    if not raw:
        raise PrerequisiteError(f"ALFWorld game data not found: {INSTALL_HINT}")
    path = Path(os.path.expandvars(raw)).expanduser()
    if not path.exists():
        raise PrerequisiteError(
            f"ALFWorld game data not found: {origin} is {path}, which does not exist; {INSTALL_HINT}"
        )
    return path


def split_dir(source: Path, split: str) -> Path:
    """`<root>/json_2.1.1/<split>` from a data root, a json_2.1.1 folder, a tarball or a folder of tarballs."""
    found: set[str] = set()
    for root in _roots(source):
        games = root / GAMES_DIR
        if (games / split).is_dir():
            return games / split
        if games.is_dir():
            found.update(p.name for p in games.iterdir() if p.is_dir())
    have = ", ".join(sorted(found)) or f"no {GAMES_DIR}/<split> folders"
    raise PrerequisiteError(
        f"ALFWorld split '{split}' not found in {source} (found: {have}). Pick one of those as "
        f"environment.train_split / eval_split, or {INSTALL_HINT}"
    )


def list_games(split: Path, task_types: tuple[str, ...], seed: int) -> list[tuple[str, str]]:
    """(task type, '<task dir>/<trial>') of every game in a split folder, sorted then shuffled with `seed`."""
    games = []
    for game in sorted(split.glob(f"*/*/{GAME_FILE}")):
        task_dir, trial = game.parent.parent.name, game.parent.name
        if "movable" in task_dir or "Sliced" in task_dir:
            continue
        kind = task_type(task_dir)
        if kind in task_types:
            games.append((kind, f"{task_dir}/{trial}"))
    random.Random(seed).shuffle(games)
    return games


def task_type(task_dir: str) -> str:
    kind = task_dir.split("-", 1)[0]
    if kind not in ALFWORLD_TASK_TYPES:
        raise PrerequisiteError(
            f"ALFWorld game folder '{task_dir}' does not start with a known task type "
            f"({', '.join(ALFWORLD_TASK_TYPES)}): is data_dir ALFWorld's json_2.1.1 data?"
        )
    return kind


def _roots(source: Path):
    """Candidate folders holding json_2.1.1/, unpacking tarballs only when reached."""
    if source.is_file():
        yield unpack(source)
        return
    yield source
    if source.name == GAMES_DIR:
        yield source.parent
    tarballs = {t for pattern in TARBALLS for t in source.glob(pattern) if t.is_file()}
    for tarball in sorted(tarballs, key=lambda t: (t.stat().st_size, t.name)):
        yield unpack(tarball)


def unpack(tarball: Path) -> Path:
    """Unpack `tarball` once into the cache; concurrent callers each unpack to a temporary folder and
    the first rename wins, so a crash or a race never leaves a half-unpacked cache."""
    name = tarball.name
    for suffix in (".tar.xz", ".tar.gz", ".tgz", ".tar"):
        name = name.removesuffix(suffix)
    target = cache_dir() / "alfworld" / f"{name}-{tarball.stat().st_size}"
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        with tarfile.open(tarball) as archive:
            # The "data" filter refuses absolute paths, links out of the folder and device files.
            if hasattr(tarfile, "data_filter"):
                archive.extractall(tmp, filter="data")
            else:  # Python < 3.10.12 has no filters
                archive.extractall(tmp)  # noqa: S202
        try:
            tmp.rename(target)
        except OSError:
            if not target.is_dir():
                raise
    except (OSError, tarfile.TarError) as err:
        raise PrerequisiteError(f"could not unpack {tarball} into {target.parent}: {err}") from err
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
