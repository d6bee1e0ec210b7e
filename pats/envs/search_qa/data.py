"""Question files for search-augmented QA: JSONL, JSON (a list of records) or parquet.

Each row becomes a `Question`: the question, a tuple of golden answers, the dataset name and the row
number. Files in the wild name their fields differently; the first field present of `QUESTION_FIELDS`
and of `ANSWER_FIELDS` is used (dotted names reach into nested records, as in Search-R1/verl parquet
files: `extra_info.answer`, `reward_model.ground_truth.target`). A row with none of them is an error
that names the file, the row and the fields it has.

The dataset name (the task type) is Search-R1's `data_source` naming (nq, triviaqa, popqa, hotpotqa,
2wikimultihopqa, musique, bamboogle), recognized in a row's `data_source` (e.g.
"google-research-datasets/nq_open" -> nq) or else in the file's folder or file name; otherwise it is
the `data_source` or the file name as written. Parsed files are cached per process (keyed by path,
mtime and size): every environment instance lists the same tasks.
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pats.errors import PrerequisiteError, install_hint

QUESTION_FIELDS = ("question", "extra_info.question", "query")
# extra_info.answer before reward_model.ground_truth: verl files write NQ's answers there as a list and
# the ground truth as one comma-joined string.
ANSWER_FIELDS = (
    "golden_answers",
    "answers",
    "answer",
    "possible_answers",
    "extra_info.golden_answers",
    "extra_info.answer",
    "extra_info.answers",
    "reward_model.ground_truth.target",
    "reward_model.ground_truth",
)
DATASETS = {  # Search-R1's data_source names -> prefixes of a squashed name that mean them
    "nq": ("nq", "naturalquestions"),
    "triviaqa": ("triviaqa", "trivia"),
    "popqa": ("popqa",),
    "hotpotqa": ("hotpot",),
    "2wikimultihopqa": ("2wiki",),
    "musique": ("musique",),
    "bamboogle": ("bamboogle",),
}
SUFFIXES = (".jsonl", ".json", ".parquet")


@dataclass(frozen=True)
class Question:
    question: str
    answers: tuple[str, ...]
    dataset: str
    row: int  # 0-based position in its file


def dataset_name(text: str) -> str | None:
    """Search-R1's name for a data_source or a file/folder name, or None if it is none of them."""
    squashed = re.sub(r"[^a-z0-9]", "", text.lower().rsplit("/", 1)[-1])
    for name, prefixes in DATASETS.items():
        if squashed.startswith(prefixes):
            return name
    return None


def load_questions(path: str | Path) -> tuple[Question, ...]:
    resolved = Path(path).resolve()
    if not resolved.is_file():
        raise PrerequisiteError(f"no question file at {resolved}; check environment.train_data/eval_data")
    stat = resolved.stat()
    key = (str(resolved), stat.st_mtime_ns, stat.st_size)
    with _LOCK:
        if key not in _CACHE:
            _CACHE[key] = _parse(resolved)
        return _CACHE[key]


_CACHE: dict[tuple[str, int, int], tuple[Question, ...]] = {}
_LOCK = threading.Lock()


def _parse(path: Path) -> tuple[Question, ...]:
    rows = _read_rows(path)
    if not rows:
        raise PrerequisiteError(f"{path}: no questions in the file")
    from_path = dataset_name(path.parent.name) or dataset_name(path.stem)
    out = []
    for number, row in enumerate(rows):
        if not isinstance(row, dict):
            raise PrerequisiteError(f"{path}: row {number} is a {type(row).__name__}, not a record")
        question = _first(row, QUESTION_FIELDS, _text)
        answers = _first(row, ANSWER_FIELDS, _answers)
        if question is None or answers is None:
            missing = "question" if question is None else "golden answers"
            fields = ANSWER_FIELDS if question is not None else QUESTION_FIELDS
            raise PrerequisiteError(
                f"{path}: row {number} has no {missing}: it has the fields {', '.join(_fields(row))}; "
                f"expected one of {', '.join(fields)}"
            )
        source = row.get("data_source")
        dataset = (dataset_name(source) if isinstance(source, str) else None) or from_path
        dataset = dataset or _slug(source if isinstance(source, str) and source else path.stem)
        out.append(Question(question, answers, dataset, number))
    return tuple(out)


def _read_rows(path: Path) -> list[Any]:
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise PrerequisiteError(
                f"reading {path} needs pyarrow, which the base install leaves out: "
                f"{install_hint('search')}, or give a .jsonl or .json file"
            ) from None
        return pq.read_table(path).to_pylist()
    if suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as lines:
            for number, line in enumerate(lines, start=1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except ValueError as err:
                        raise PrerequisiteError(f"{path}:{number}: not a JSON line ({err})") from None
        return rows
    if suffix == ".json":
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as err:
            raise PrerequisiteError(f"{path}: not JSON ({err})") from None
        if not isinstance(rows, list):
            raise PrerequisiteError(f"{path}: a .json question file must hold a list of records")
        return rows
    raise PrerequisiteError(f"{path}: unknown question file type; use one of {', '.join(SUFFIXES)}")


def _first(row: dict[str, Any], fields: tuple[str, ...], convert):
    for field in fields:
        value: Any = row
        for part in field.split("."):
            if isinstance(value, str) and value.startswith("{"):  # e.g. PopQA's reward_model, a JSON string
                value = _json(value, None)
            value = value.get(part) if isinstance(value, dict) else None
        converted = convert(value) if value is not None else None
        if converted:
            return converted
    return None


def _text(value: Any) -> str | None:
    return " ".join(value.split()) if isinstance(value, str) else None


def _answers(value: Any) -> tuple[str, ...] | None:
    if isinstance(value, dict) and "target" in value:  # Search-R1's ground_truth {"target": [...]}
        value = value["target"]
    if isinstance(value, str) and value.startswith("["):  # PopQA's possible_answers: a JSON list string
        value = _json(value, [value])
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list | tuple):
        return None
    answers = tuple(str(a).strip() for a in value if isinstance(a, str | int | float) and str(a).strip())
    return answers or None


def _json(text: str, default: Any) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return default


def _fields(row: dict[str, Any]) -> list[str]:
    names = []
    for key, value in row.items():
        names.append(key)
        if isinstance(value, dict):
            names += [f"{key}.{inner}" for inner in value]
    return names


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower().rsplit("/", 1)[-1]).strip("_") or "qa"
