"""`pats data fetch`: download a data set's files, check each sha256, and put them under the data root.

A file is streamed to `<name>.part` beside its place and renamed into place only once its sha256
matches, so the data root never holds half a file under a real name. A `.part` left by a broken
download is resumed with an HTTP Range request; a server that ignores Range sends the whole file
again, and a resumed file that fails the check is downloaded once more from the start before the
checksum mismatch is refused (and the `.part` removed). ALFWorld's public source is a repository
archive: its game folder is unpacked beside its place, checked against the catalog's tree digest,
then renamed into place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from collections.abc import Callable
from fnmatch import fnmatch
from http.client import HTTPException
from pathlib import Path, PurePosixPath

from pats.data.catalog import BY_NAME, DataFile, Dataset, GameArchive
from pats.errors import PrerequisiteError

CHUNK = 1 << 20
TIMEOUT_S = 60


def fetch(
    names: list[str], root: Path, mirror: str | None = None, say: Callable[[str], None] = print
) -> None:
    """Fetch each named data set into `root`, from `mirror` (a URL serving the data root's layout) when
    given, else from the public sources."""
    unknown = [n for n in names if n not in BY_NAME]
    if unknown or not names:
        raise PrerequisiteError(
            f"unknown data set(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(BY_NAME)} "
            "(`pats data list` shows what each shipped spec needs)"
        )
    for name in names:
        dataset = BY_NAME[name]
        if dataset.archive is not None and not mirror:
            fetch_archive(dataset.archive, root, say)
            continue
        for file in dataset.files:
            fetch_file(file, root, mirror, say)


def fetch_file(file: DataFile, root: Path, mirror: str | None, say: Callable[[str], None]) -> Path:
    target = root / file.path
    if target.is_file() and sha256_of(target) == file.sha256:
        say(f"have {target}")
        return target
    url = f"{mirror.rstrip('/')}/{file.path}" if mirror else file.url
    if url is None:  # a file only the archive holds; fetch() takes the archive instead
        raise PrerequisiteError(f"{file.path} has no public source of its own; fetch it from a mirror")
    target.parent.mkdir(parents=True, exist_ok=True)
    say(f"get  {url} ({_size(file.size)})")
    download(url, target, file.sha256)
    say(f"ok   {target}")
    return target


def download(url: str, target: Path, sha256: str) -> None:
    """`url` to `target` through `target.part`, resumed when a part is there; refused on a mismatch."""
    part = target.with_name(target.name + ".part")
    resumed = part.is_file() and part.stat().st_size > 0
    stream(url, part)
    digest = sha256_of(part)
    if digest != sha256 and resumed:  # the old part may not have been a prefix of this file
        part.unlink()
        stream(url, part)
        digest = sha256_of(part)
    if digest != sha256:
        part.unlink()
        raise PrerequisiteError(
            f"checksum mismatch for {url}: sha256 {digest}, expected {sha256}; the file was refused and "
            "removed. The source changed or the download was corrupted: try again, or use another mirror"
        )
    os.replace(part, target)


def stream(url: str, part: Path) -> None:
    """Append the rest of `url` to `part` (Range), or write it whole when the server sends it whole."""
    offset = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            appending = response.status == 206
            expected = _expected_bytes(response, offset if appending else 0)
            written = offset if appending else 0
            with open(part, "ab" if appending else "wb") as out:
                while chunk := response.read(CHUNK):
                    out.write(chunk)
                    written += len(chunk)
    except urllib.error.HTTPError as err:
        if err.code == 416 and offset:  # the part is as long as the file, or longer: start again
            part.unlink()
            return stream(url, part)
        raise PrerequisiteError(f"downloading {url} failed: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, HTTPException, OSError) as err:
        again = (
            f"run the command again to resume from {part}"
            if part.is_file() and part.stat().st_size
            else "check the connection, or download from a mirror with --mirror URL"
        )
        raise PrerequisiteError(
            f"downloading {url} failed ({getattr(err, 'reason', None) or err}); {again}"
        ) from None
    if expected is not None and written < expected:
        raise PrerequisiteError(
            f"downloading {url} stopped after {written} of {expected} bytes; run the command again to "
            f"resume from {part}"
        )


def _expected_bytes(response, offset: int) -> int | None:
    length = response.headers.get("Content-Length")
    return offset + int(length) if length and length.isdigit() else None


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} KB"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def tree_digest(folder: Path) -> str:
    """sha256 over the sorted lines `<path from folder's parent>\\t<file sha256>` of every file in folder."""
    lines = sorted(
        f"{p.relative_to(folder.parent).as_posix()}\t{sha256_of(p)}\n"
        for p in folder.rglob("*")
        if p.is_file()
    )
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def fetch_archive(archive: GameArchive, root: Path, say: Callable[[str], None]) -> Path:
    """Download a repository archive, keep its `members` folder, check the tree digest, move it in place."""
    target = root / archive.path
    if target.is_dir():  # only a checked folder is ever renamed to this name
        say(f"have {target}")
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.parent / f".{target.name}.tar.gz.part"
    say(
        f"get  {archive.url} (the repository at its commit; keeps {archive.files} files of {archive.folder}/)"
    )
    stream(archive.url, part)
    unpacked = target.parent / f".{target.name}.unpacking"
    shutil.rmtree(unpacked, ignore_errors=True)
    try:
        kept = _unpack_members(part, archive.keep, unpacked)
        digest = tree_digest(unpacked / archive.folder) if kept else "(no files)"
        if digest != archive.tree_sha256:
            raise PrerequisiteError(
                f"checksum mismatch for {archive.folder}/ of {archive.url}: tree digest {digest} over {kept} "
                f"files, expected {archive.tree_sha256} over {archive.files}; refused and removed"
            )
        os.replace(unpacked / archive.folder, target)
    finally:
        shutil.rmtree(unpacked, ignore_errors=True)
        part.unlink(missing_ok=True)
    say(f"ok   {target} ({archive.files} files)")
    return target


def _unpack_members(archive: Path, keep: tuple[str, ...], out: Path) -> int:
    """Extract the regular files of a .tar.gz whose path below its top folder matches `keep` into `out`."""
    count = 0
    try:
        with tarfile.open(archive, "r:*") as tar:
            for member in tar:
                parts = PurePosixPath(member.name).parts[1:]  # below the archive's top folder
                if not member.isfile() or ".." in parts or not any(fnmatch("/".join(parts), k) for k in keep):
                    continue
                dest = out.joinpath(*parts)
                dest.parent.mkdir(parents=True, exist_ok=True)
                # (ignore: extractfile is None only for a member that is not a file, skipped above)
                with tar.extractfile(member) as src, open(dest, "wb") as f:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, f)
                count += 1
    except (tarfile.TarError, EOFError, OSError) as err:
        raise PrerequisiteError(f"cannot unpack {archive}: {err}; run the command again") from None
    return count


def present(dataset: Dataset, root: Path) -> list[tuple[str, bool]]:
    """(path under root, found) for each file of the data set; the unpacked archive counts for them."""
    if dataset.archive is not None and (root / dataset.archive.path).is_dir():
        return [(dataset.archive.path, True)]
    return [
        (f.path, (root / f.path).is_file() and (root / f.path).stat().st_size == f.size)
        for f in dataset.files
    ]
