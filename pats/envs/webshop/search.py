"""Product search: BM25 (bm25s) over the text WebShop indexes, in place of its Java/pyserini index.

Each product is indexed as WebShop's search_engine/convert_product_file_format.py builds its
documents: title, description, first bullet point and the option text, lower-cased. A search returns
up to 50 products (engine.py SEARCH_RETURN_N) with a positive score; pyserini's Lucene BM25 and
its tokenizer (stemming) rank somewhat differently from bm25s with English stop words and no stemmer.
The index is built once per catalog and process (about 0.1 s per 1000 products) and shared.
"""

from __future__ import annotations

import threading
from typing import Any

from pats.envs.webshop.catalog import Catalog
from pats.errors import PrerequisiteError, install_hint

SEARCH_RETURN_N = 50


class ProductSearch:
    def __init__(self, catalog: Catalog):
        try:
            import bm25s
        except ImportError:
            raise PrerequisiteError(
                "the webshop environment searches with bm25s, which the base install leaves out: "
                f"{install_hint('search')}"
            ) from None
        self._asins = [p.asin for p in catalog.products]
        self._tokenizer = bm25s.tokenization.Tokenizer(stopwords="en", stemmer=None)
        ids = self._tokenizer.tokenize(
            [document(p) for p in catalog.products], return_as="ids", show_progress=False
        )
        self._index = bm25s.BM25()
        self._index.index(ids, show_progress=False)
        self._lock = threading.Lock()  # bm25s keeps no per-query state, but its tokenizer caches

    def search(self, query: str) -> list[str]:
        """Asins of the best products for `query`, best first (at most 50, none with score 0)."""
        k = min(SEARCH_RETURN_N, len(self._asins))
        if k == 0:
            return []
        with self._lock:
            ids = self._tokenizer.tokenize(
                [query.lower()], update_vocab=False, return_as="ids", show_progress=False
            )
            found, scores = self._index.retrieve(ids, k=k, show_progress=False, n_threads=1)
        return [self._asins[i] for i, s in zip(found[0], scores[0], strict=True) if s > 0]


def document(product: Any) -> str:
    options = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product.options.items())
    first_bullet = product.bullets[0] if product.bullets else ""
    return " ".join([product.title, product.description, first_bullet, options]).lower()


_INDEXES: dict[int, tuple[Catalog, ProductSearch]] = {}  # the catalog is kept so its id stays unique
_LOCK = threading.Lock()


def search_index(catalog: Catalog) -> ProductSearch:
    """The shared index of `catalog`, built on first use."""
    with _LOCK:
        entry = _INDEXES.get(id(catalog))
        if entry is None or entry[0] is not catalog:
            entry = _INDEXES[id(catalog)] = (catalog, ProductSearch(catalog))
        return entry[1]
