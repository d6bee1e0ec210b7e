"""Search-augmented QA (`kind: search_qa`): the Search-R1 protocol over bm25s or a retrieval server.

- `env`: `SearchQaEnv`, registered as "search_qa" when this package is imported.
- `protocol`: reading `<search>`/`<answer>` out of the policy's output; `<information>` passages.
- `answers`: answer normalization, exact match and F1 (Search-R1's qa_em).
- `retrievers`: `Bm25Retriever` (bm25s over a JSONL corpus) and `HttpRetriever` (Search-R1's /retrieve).
- `data`: question files (JSONL, JSON, parquet) with golden answers.
"""

from pats.envs.search_qa.answers import exact_match, f1, normalize_answer
from pats.envs.search_qa.data import Question, load_questions
from pats.envs.search_qa.env import SearchQaEnv
from pats.envs.search_qa.protocol import Passage, parse_output
from pats.envs.search_qa.retrievers import Bm25Retriever, HttpRetriever, RetrieverError, make_retriever

__all__ = [
    "Bm25Retriever",
    "HttpRetriever",
    "Passage",
    "Question",
    "RetrieverError",
    "SearchQaEnv",
    "exact_match",
    "f1",
    "load_questions",
    "make_retriever",
    "normalize_answer",
    "parse_output",
]
