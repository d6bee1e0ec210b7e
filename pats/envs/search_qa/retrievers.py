"""Retrievers for search-augmented QA: bm25s over a JSONL corpus, or Search-R1's retrieval server.

Both answer `search(query) -> list[Passage]` (blocking; the environment calls it off the event loop).

- `Bm25Retriever`: a bm25s index over a JSONL corpus of `{"id", "contents"}` lines (FlashRAG/Search-R1
  wiki-18 format; `{"title", "text"}` lines are accepted too). Indexes are built once per corpus file
  per process and shared by every environment instance. Departs from Search-R1's BM25 (pyserini/Lucene
  with Porter stemming): bm25s with English stop words and no stemmer, so scores and ties differ. It
  holds the corpus in memory: for the full 21M-passage wiki-18, run a retrieval server and use `http`.
- `HttpRetriever`: a client of Search-R1's `search_r1/search/retrieval_server.py`: POST {"queries",
  "topk", "return_scores": true} to /retrieve, answer {"result": [[{"document": {"id", "contents"},
  "score"}, ...]]}. Connection errors, timeouts, HTTP 408/429/5xx are retried `max_retries` times with
  exponential backoff; other HTTP errors and malformed answers fail at once (retrying will not fix a
  wrong URL). What finally fails raises `RetrieverError`, which the environment turns into an
  `EnvironmentFault`. The timeout is urllib's: per connect and per read, not for the whole request.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from pats.envs.search_qa.protocol import Passage
from pats.errors import PrerequisiteError, install_hint
from pats.spec.environments import Bm25RetrieverSpec, HttpRetrieverSpec

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class RetrieverError(Exception):
    """The retriever failed for good (after its retries); the message says why."""


class Bm25Retriever:
    def __init__(self, spec: Bm25RetrieverSpec):
        self.spec = spec
        self.index = _bm25_index(spec.corpus)

    def search(self, query: str) -> list[Passage]:
        return self.index.search(query, self.spec.top_k)


class HttpRetriever:
    def __init__(self, spec: HttpRetrieverSpec):
        self.spec = spec
        self.attempts = 0  # requests sent by this client, retries included (for tests and logs)

    def search(self, query: str) -> list[Passage]:
        body = json.dumps({"queries": [query], "topk": self.spec.top_k, "return_scores": True}).encode()
        failures: list[str] = []
        for attempt in range(self.spec.max_retries + 1):
            if attempt:
                time.sleep(self.spec.backoff_s * 2 ** (attempt - 1))
            self.attempts += 1
            request = urllib.request.Request(
                self.spec.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
            )
            try:
                with urllib.request.urlopen(request, timeout=self.spec.timeout_s) as response:
                    answer = response.read()
            except urllib.error.HTTPError as err:
                if err.code not in RETRYABLE_STATUS:
                    raise RetrieverError(
                        f"retrieval server {self.spec.url} answered HTTP {err.code} {err.reason}; check "
                        "environment.retriever.url (Search-R1's server serves POST /retrieve)"
                    ) from err
                failures.append(f"HTTP {err.code}")
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                failures.append(str(getattr(err, "reason", err)) or type(err).__name__)
            else:
                return _passages(answer, self.spec.url)
        raise RetrieverError(
            f"retrieval server {self.spec.url} failed {len(failures)} times "
            f"({'; '.join(failures)}); is it running? (timeout_s={self.spec.timeout_s}, "
            f"max_retries={self.spec.max_retries})"
        )


def make_retriever(spec: Bm25RetrieverSpec | HttpRetrieverSpec) -> Bm25Retriever | HttpRetriever:
    return Bm25Retriever(spec) if spec.kind == "bm25" else HttpRetriever(spec)


def _passages(raw: bytes, url: str) -> list[Passage]:
    """The first query's passages from a /retrieve answer (with or without scores)."""
    try:
        hits = json.loads(raw)["result"][0]
        return [_passage(hit) for hit in hits]
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
        raise RetrieverError(
            f"retrieval server {url} answered something other than Search-R1's "
            f'{{"result": [[{{"document": {{"id", "contents"}}, "score"}}]]}}: {raw[:200]!r}'
        ) from err


def _passage(hit: dict[str, Any]) -> Passage:
    document = hit.get("document", hit)  # return_scores=false servers answer bare documents
    return Passage(str(document.get("id", "")), _contents(document), float(hit.get("score", 0.0)))


def _contents(row: dict[str, Any]) -> str:
    if "contents" in row:
        return str(row["contents"])
    return f'"{row["title"]}"\n{row["text"]}'  # raises KeyError for rows that are neither


class Bm25Index:
    """A bm25s index over one corpus, with the passages it returns."""

    def __init__(self, path: Path):
        import bm25s

        self.passages = _read_corpus(path)
        self.retriever = bm25s.BM25()
        texts = [p.contents for p in self.passages]
        self.retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        self._lock = threading.Lock()  # bm25s retrieval is not documented as thread-safe

    def search(self, query: str, k: int) -> list[Passage]:
        import bm25s

        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        with self._lock:
            ids, scores = self.retriever.retrieve(tokens, k=min(k, len(self.passages)), show_progress=False)
        return [
            Passage(self.passages[i].id, self.passages[i].contents, float(s))
            for i, s in zip(ids[0].tolist(), scores[0].tolist(), strict=True)
        ]


_INDEXES: dict[tuple[str, int, int], Bm25Index] = {}  # (resolved path, mtime, size) -> index
_INDEXES_LOCK = threading.Lock()


def _bm25_index(corpus: str) -> Bm25Index:
    path = Path(corpus).resolve()
    if not path.is_file():
        raise PrerequisiteError(
            f"environment.retriever.corpus: no file at {path}; give a JSONL corpus of "
            '{"id", "contents"} lines (e.g. corpus/flashrag_wiki18_sample_1000.jsonl of `pats data fetch search_qa`)'
        )
    try:
        import bm25s  # noqa: F401
    except ImportError:
        raise PrerequisiteError(
            f"the bm25 retriever needs bm25s, which the base install leaves out: {install_hint('search')}"
        ) from None
    stat = path.stat()
    key = (str(path), stat.st_mtime_ns, stat.st_size)
    with _INDEXES_LOCK:  # one build per corpus, even when many episodes start at once
        if key not in _INDEXES:
            _INDEXES[key] = Bm25Index(path)
        return _INDEXES[key]


def _read_corpus(path: Path) -> list[Passage]:
    passages = []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                passages.append(Passage(str(row.get("id", number - 1)), _contents(row)))
            except (ValueError, KeyError, AttributeError) as err:
                raise PrerequisiteError(
                    f"{path}:{number}: not a corpus line ({type(err).__name__}: {err}); each line must be "
                    'a JSON object with "contents" (or "title" and "text")'
                ) from None
    if not passages:
        raise PrerequisiteError(f"{path}: the corpus is empty; give at least one passage")
    return passages
