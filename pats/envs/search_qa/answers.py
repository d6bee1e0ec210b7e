"""Answer normalization, exact match and token F1, as Search-R1 scores search-augmented QA.

`normalize_answer` and `exact_match` follow Search-R1's `verl/utils/reward_score/qa_em.py`
(`normalize_answer`, `em_check`): lower-case, drop ASCII punctuation, drop the articles a/an/the,
collapse whitespace; a prediction matches when it equals any normalized golden answer. `f1` is the
SQuAD/HotpotQA token F1 on the same normalization, the maximum over the golden answers (Search-R1
reports EM only; F1 is reported here beside it).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    # The order matters and is Search-R1's: punctuation goes before articles ("the-end" -> "theend").
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golden: Sequence[str]) -> bool:
    predicted = normalize_answer(prediction)
    return any(predicted == normalize_answer(answer) for answer in golden)


def f1(prediction: str, golden: Sequence[str]) -> float:
    return max((_token_f1(prediction, answer) for answer in golden), default=0.0)


def _token_f1(prediction: str, answer: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
    common = sum((Counter(predicted) & Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)
