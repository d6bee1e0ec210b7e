"""`pats data fetch` for real over HTTP: a mirror on 127.0.0.1 serves ../shared/data (the data root's
layout); downloads are checked, a mismatch refused, a broken download resumed or redone, and nothing
half-written is left under a real name. The public sources cannot be reached from CI; only their form
is checked here."""

from __future__ import annotations

import io
import os
import re
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pats.cli.main import main
from pats.data.catalog import BY_NAME, DATASETS, GameArchive
from pats.data.fetch import fetch, fetch_archive, sha256_of
from pats.errors import PrerequisiteError

REPO = Path(__file__).resolve().parents[1]
# tree digest of the 140 valid_seen games, computed once from the tarball outside pats
VALID_SEEN_TREE = "7e47e94b92e29fdfeb4e8d2d9d10afc2e47668cb51af3cd78e8ce0c2cac6b3cc"


class Mirror(ThreadingHTTPServer):
    """A static file server with Range support that can serve other bytes, cut a download short, or
    ignore Range (as http.server's SimpleHTTPRequestHandler does)."""

    def __init__(self, root: Path):
        super().__init__(("127.0.0.1", 0), MirrorHandler)
        self.root, self.ranges = root, True
        self.replace: dict[str, bytes] = {}  # URL path -> bytes served instead
        self.cut: dict[str, int] = {}  # URL path -> close the connection after this many body bytes, once
        self.requests: list[tuple[str, str | None]] = []  # (path, Range header)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class MirrorHandler(BaseHTTPRequestHandler):
    server: Mirror

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Range")))
        file = self.server.root / self.path.lstrip("/")
        data = self.server.replace.get(self.path)
        if data is None:
            if ".." in self.path or not file.is_file():
                self.send_error(404)
                return
            data = file.read_bytes()
        start = 0
        wanted = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if wanted and self.server.ranges and int(wanted[1]) < len(data):
            start = int(wanted[1])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = self.server.cut.pop(self.path, None)
        self.wfile.write(body if cut is None else body[:cut])
        self.close_connection = cut is not None

    def log_message(self, *args):
        pass


@pytest.fixture
def mirror(shared_data):
    server = Mirror(shared_data)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def leftovers(root: Path) -> list[str]:
    return sorted(
        str(p.relative_to(root)) for p in root.rglob("*") if p.name.startswith(".") or ".part" in p.name
    )


def test_fetch_from_the_mirror_puts_checked_files_in_place_once(mirror, tmp_path, shared_data):
    said: list[str] = []
    fetch(["skillrl", "search_qa"], tmp_path, mirror.url, said.append)
    for name in ("skillrl", "search_qa"):
        for f in BY_NAME[name].files:
            assert sha256_of(tmp_path / f.path) == f.sha256 == sha256_of(shared_data / f.path)
    assert leftovers(tmp_path) == []
    asked = len(mirror.requests)
    assert asked == len(BY_NAME["skillrl"].files) + len(BY_NAME["search_qa"].files)
    fetch(["skillrl"], tmp_path, mirror.url, said.append)
    assert len(mirror.requests) == asked and said[-1].startswith("have "), (
        "a checked file is not fetched again"
    )


def test_a_checksum_mismatch_is_refused_and_leaves_nothing(mirror, tmp_path):
    bank = BY_NAME["skillrl"].files[0]
    mirror.replace["/" + bank.path] = b'{"general_skills": []}'
    with pytest.raises(PrerequisiteError, match="checksum mismatch .*refused and removed"):
        fetch(["skillrl"], tmp_path, mirror.url, print)
    assert not (tmp_path / bank.path).exists() and leftovers(tmp_path) == []


def test_a_broken_download_is_resumed_where_it_stopped(mirror, tmp_path):
    corpus = next(f for f in BY_NAME["search_qa"].files if f.path.startswith("corpus/flashrag_wiki18"))
    mirror.cut["/" + corpus.path] = 100_000
    with pytest.raises(
        PrerequisiteError, match="stopped after 100000 of 677910 bytes; run the command again"
    ):
        fetch(["search_qa"], tmp_path, mirror.url, print)
    assert not (tmp_path / corpus.path).exists(), "no half-written file under its real name"
    assert (tmp_path / (corpus.path + ".part")).stat().st_size == 100_000
    fetch(["search_qa"], tmp_path, mirror.url, print)
    assert ("/" + corpus.path, "bytes=100000-") in mirror.requests
    assert sha256_of(tmp_path / corpus.path) == corpus.sha256 and leftovers(tmp_path) == []


@pytest.mark.parametrize("ranges", [True, False], ids=["stale-part-redone", "no-range-server"])
def test_a_part_that_cannot_be_resumed_is_downloaded_again(mirror, tmp_path, ranges):
    mirror.ranges = ranges
    bank = BY_NAME["skillrl"].files[1]
    part = tmp_path / (bank.path + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"not the start of this file")
    fetch(["skillrl"], tmp_path, mirror.url, print)
    assert sha256_of(tmp_path / bank.path) == bank.sha256 and leftovers(tmp_path) == []
    asked = [r for r in mirror.requests if r[0] == "/" + bank.path]
    assert asked == ([("/" + bank.path, "bytes=26-"), ("/" + bank.path, None)] if ranges else asked[:1])


def repository_archive(shared_data: Path, change: bytes | None = None) -> bytes:
    """The valid_seen games as GitHub packs a repository: <repo>-<commit>/json_2.1.1/..., plus other files."""
    out = io.BytesIO()
    with (
        tarfile.open(shared_data / "alfworld" / "json_2.1.1_valid_seen.tar.xz") as games,
        tarfile.open(fileobj=out, mode="w:gz") as repo,
    ):
        for other in ("README.md", "json_2.1.1/valid_unseen/a-1/trial_1/traj_data.json"):
            info = tarfile.TarInfo(f"lz-tool-skillopt-76b659f/{other}")
            info.size = 5
            repo.addfile(info, io.BytesIO(b"hello"))
        for i, member in enumerate(m for m in games if m.isfile()):
            data = games.extractfile(member).read()
            if change is not None and i == 0:
                data += change
            member.name = f"lz-tool-skillopt-76b659f/{member.name}"
            member.size = len(data)
            repo.addfile(member, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("change", [None, b"\n"], ids=["checked", "one-game-changed"])
def test_the_public_alfworld_archive_is_unpacked_and_checked_by_tree(mirror, shared_data, tmp_path, change):
    mirror.replace["/repo.tar.gz"] = repository_archive(shared_data, change)
    keep = BY_NAME["alfworld"].archive.keep
    archive = GameArchive(
        f"{mirror.url}/repo.tar.gz", "json_2.1.1", keep, "alfworld/json_2.1.1", 140, 0, VALID_SEEN_TREE
    )
    root = tmp_path / "data"
    if change is None:
        fetch_archive(archive, root, print)
        games = sorted((root / "alfworld/json_2.1.1/valid_seen").glob("*/*/game.tw-pddl"))
        assert len(games) == 140 and [p.name for p in (root / "alfworld/json_2.1.1").iterdir()] == [
            "valid_seen"
        ]
    else:
        with pytest.raises(PrerequisiteError, match="tree digest .* over 140 files, expected 7e47e9"):
            fetch_archive(archive, root, print)
        assert not (root / "alfworld/json_2.1.1").exists()
    assert leftovers(root) == []


def test_the_cli_fetches_into_pats_data_and_the_spec_then_validates(mirror, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATS_DATA", str(tmp_path))
    assert main(["validate", "experiments/webshop/grow.yaml"]) == 2
    assert "pats data fetch NAME" in capsys.readouterr().err
    assert main(["data", "list", "experiments/webshop/grow.yaml"]) == 0
    assert "fetch what is missing: pats data fetch skillrl" in capsys.readouterr().out
    assert main(["data", "fetch", "skillrl", "--mirror", mirror.url]) == 0
    assert f"data root: {tmp_path}" in capsys.readouterr().out
    assert main(["validate", "experiments/webshop/grow.yaml"]) == 0
    assert main(["data", "list", "experiments/webshop/grow.yaml"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"skillrl +found +skill_banks/skillrl/webshop.json", out) and "fetch what" not in out


def test_the_catalog_matches_the_shared_data_and_its_sources(shared_data):
    """Every file's sha256 and size are those of ../shared/data, and its public URL is raw GitHub at a
    commit SOURCES.md names (the URLs themselves cannot be reached from CI)."""
    if not (shared_data / "SOURCES.md").is_file() and not os.environ.get("CI"):
        pytest.skip(f"{shared_data} is a data root without the project's SOURCES.md and SHA256SUMS")
    sums = dict(
        reversed(line.split("  ./")) for line in (shared_data / "SHA256SUMS").read_text().splitlines() if line
    )
    sources = (shared_data / "SOURCES.md").read_text()
    files = [f for d in DATASETS for f in d.files]
    assert {f.path for f in files} == set(sums), "every shared file is in the catalog"
    for f in files:
        assert (sums[f.path], (shared_data / f.path).stat().st_size) == (f.sha256, f.size)
        if f.url is not None:
            repo, commit = re.fullmatch(
                r"https://raw\.githubusercontent\.com/([^/]+/[^/]+)/([0-9a-f]{40})/.+", f.url
            ).groups()
            assert f"{repo} @ {commit}" in sources, f.url
    archive = BY_NAME["alfworld"].archive
    repo, commit = re.fullmatch(
        r"https://github\.com/([^/]+/[^/]+)/archive/([0-9a-f]{40})\.tar\.gz", archive.url
    ).groups()
    assert f"{repo} @ {commit}" in sources


def test_an_unknown_data_set_names_the_known_ones(tmp_path):
    with pytest.raises(
        PrerequisiteError, match="unknown data set.*webshop.*known: alfworld, search_qa, skillrl"
    ):
        fetch(["webshop"], tmp_path)


def test_an_unreachable_source_says_so_and_leaves_nothing(tmp_path):
    import socket

    with socket.socket() as sock:  # a port that was free a moment ago: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(PrerequisiteError, match="failed .*check the connection, or download from a mirror"):
        fetch(["skillrl"], tmp_path, f"http://127.0.0.1:{port}")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_list_says_what_alfworld_specs_read_and_finds_the_unpacked_games(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATS_DATA", str(tmp_path))
    monkeypatch.delenv("ALFWORLD_DATA", raising=False)
    specs = ["experiments/alfworld/local.yaml", "experiments/alfworld/pats.yaml"]
    assert main(["data", "list", *specs]) == 0
    out = capsys.readouterr().out
    assert re.search(r"local.yaml +alfworld +missing +alfworld\n", out)
    assert re.search(r"pats.yaml +- +missing +\$ALFWORLD_DATA \(unset\): run alfworld-download", out)
    assert out.rstrip().endswith("fetch what is missing: pats data fetch alfworld")
    (tmp_path / "alfworld" / "json_2.1.1" / "valid_seen").mkdir(parents=True)  # as fetched from GitHub
    assert main(["data", "list", *specs]) == 0
    out = capsys.readouterr().out
    assert re.search(r"alfworld +6.4 MB +found", out) and re.search(r"local.yaml +alfworld +found", out)
