"""No broken link in the docs: every relative link of README.md and docs/ (the journal included) names a
file or folder that exists, and a `#anchor` names a heading of the file it points to (issue 50).

Links inside code (fenced blocks, `inline`) are not links; `http(s):` and `mailto:` links are not
followed (CI runs offline). Anchors are GitHub's: the heading lowercased, punctuation but `-` and `_`
dropped, spaces as `-`, and `-1`, `-2`, ... for repeated headings.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"\s*(```|~~~)")


def prose(path: Path) -> list[tuple[int, str]]:
    """(line number, text) of a markdown file's lines outside fenced code, inline code removed."""
    out, fenced = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            out.append((n, re.sub(r"`[^`]*`", "", line)))
    return out


def slugs(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file (those outside fenced code)."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.*)", line)):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def broken_links(path: Path) -> list[str]:
    """What is wrong with each relative link of one markdown file."""
    problems = []
    for n, line in prose(path):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            where = f"{path.relative_to(REPO)}:{n}: {target}"
            if not dest.exists():
                problems.append(f"{where}: no such file")
            elif anchor and (dest.suffix != ".md" or anchor not in slugs(dest)):
                problems.append(f"{where}: no heading #{anchor} in {dest.name}")
    return problems


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_every_link_in_the_docs_resolves():
    docs = documents()
    assert REPO / "docs" / "results.md" in docs and any(p.parent.name == "journal" for p in docs)
    problems = [p for doc in docs for p in broken_links(doc)]
    assert not problems, "broken links (fix the path or the anchor):\n" + "\n".join(problems)


def test_a_broken_link_is_found(tmp_path, monkeypatch):
    """The checker can fail: a missing file, a missing heading, and an anchor of a heading that
    exists only inside a code block are each reported; a link in code and a web link are not."""
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# Title (`x.py`)\n\n## Twice\n\n## Twice\n")
    doc = tmp_path / "docs" / "b.md"
    doc.write_text(
        "[ok](a.md#title-xpy) [ok](a.md#twice-1) [ok](#here) [web](https://example.org/x)\n"
        "# Here\n"
        "`[in code](missing.md)`\n"
        "```\n# Fenced\n[in a block](missing.md)\n```\n"
        "[gone](missing.md) [no heading](a.md#nothing) [fenced](#fenced)\n"
    )
    assert broken_links(doc) == [
        "docs/b.md:8: missing.md: no such file",
        "docs/b.md:8: a.md#nothing: no heading #nothing in a.md",
        "docs/b.md:8: #fenced: no heading #fenced in b.md",
    ]
