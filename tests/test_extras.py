"""Optional dependencies (extras) the main install leaves out: the quickstart never imports them, and a
spec or environment that needs a missing one stops with a PrerequisiteError naming the extra.

A package is made missing by `sys.modules[name] = None`: `import name` then raises ImportError and
`importlib.util.find_spec(name)` answers None, as for a package that is not installed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pats.cli.main import main
from pats.errors import PrerequisiteError
from pats.spec import load_spec
from pats.spec.models import LLMSpec

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"
LLM_SPEC = ROOT / "experiments" / "ablations" / "llm_reviser_openai.yaml"


@pytest.fixture
def without(monkeypatch):
    def hide(*names: str) -> None:
        for name in names:
            monkeypatch.setitem(sys.modules, name, None)

    return hide


def test_quickstart_validates_without_llm_and_search_extras(without, capsys):
    without("dspy", "litellm", "bm25s", "pyarrow")
    assert main(["validate", str(QUICKSTART)]) == 0
    assert "ok: " in capsys.readouterr().out


def test_llm_spec_without_llm_extra_names_the_extra(without, capsys):
    without("dspy", "litellm")
    assert main(["validate", str(LLM_SPEC)]) == 2  # validate: any failed spec is exit 2
    err = capsys.readouterr().err
    assert str(LLM_SPEC) in err and "reviser.llm" in err
    assert "pip install -e '.[llm]'` in a clone of pats" in err and "dspy and litellm" in err


def test_run_check_without_llm_extra_is_a_prerequisite_error(without):
    from pats.llm_check import check_providers

    spec = load_spec(LLM_SPEC)
    without("litellm")
    with pytest.raises(
        PrerequisiteError, match=r"reviser\.llm: .*needs litellm.*-e '\.\[llm\]'` in a clone of pats"
    ):
        check_providers(spec)
    assert PrerequisiteError.exit_code == 3  # what `pats run` exits with


def test_llm_caller_and_scripted_helpers_without_llm_extra(without):
    from pats.lm.caller import LLMCaller
    from pats.testing import scripted_judge, scripted_reviser

    without("dspy")
    with pytest.raises(PrerequisiteError, match=r"-e '\.\[llm\]'` in a clone of pats"):
        LLMCaller(LLMSpec(model="openai/x"), lm=object(), adapter=object())
    with pytest.raises(PrerequisiteError, match=r"-e '\.\[llm\]'` in a clone of pats"):
        scripted_reviser([])
    with pytest.raises(PrerequisiteError, match=r"-e '\.\[llm\]'` in a clone of pats"):
        scripted_judge([])


def test_search_environments_without_search_extra(without, tmp_path):
    from pats.envs.search_qa.data import load_questions
    from pats.envs.search_qa.retrievers import Bm25Retriever
    from pats.envs.webshop.search import ProductSearch
    from pats.spec.environments import Bm25RetrieverSpec

    without("bm25s", "pyarrow", "pyarrow.parquet")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "1", "contents": "Paris\\nThe capital of France."}\n', encoding="utf-8")
    with pytest.raises(PrerequisiteError, match=r"bm25s.*-e '\.\[search\]'` in a clone of pats"):
        Bm25Retriever(Bm25RetrieverSpec(corpus=str(corpus)))
    with pytest.raises(PrerequisiteError, match=r"webshop.*bm25s.*-e '\.\[search\]'` in a clone of pats"):
        ProductSearch(catalog=None)  # bm25s is imported before the catalog is read
    questions = tmp_path / "nq.parquet"
    questions.write_bytes(b"PAR1")
    with pytest.raises(PrerequisiteError, match=r"pyarrow.*-e '\.\[search\]'` in a clone of pats"):
        load_questions(questions)


def test_check_providers_without_llm_extra_starts_with_the_file_and_every_llm_field(without):
    """check_providers' refusal read from its start: the spec file when given, then every LLM field
    joined by "and" (found by pats/llm_check.py's mutation run)."""
    from pats.llm_check import check_providers, spec_llms

    spec = load_spec(LLM_SPEC)
    fields = " and ".join(path for path, _ in spec_llms(spec))
    assert " and " in fields  # the spec calls two LLMs, so the join is read
    without("litellm")
    with pytest.raises(PrerequisiteError) as bare:
        check_providers(spec)
    assert str(bare.value).startswith(f"{fields}: ")
    with pytest.raises(PrerequisiteError) as named:
        check_providers(spec, file="exp.yaml")
    assert str(named.value).startswith(f"exp.yaml: {fields}: ")
