"""Search-augmented QA: answer scoring, output parsing, question files (every shared one), bm25 and
HTTP retrieval against real local servers, and a scripted searcher that must reach exact match 1."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pats.envs.search_qa import data as qa_data
from pats.envs.search_qa.answers import exact_match, f1, normalize_answer
from pats.envs.search_qa.data import load_questions
from pats.envs.search_qa.env import SearchQaEnv
from pats.envs.search_qa.protocol import INVALID_OBSERVATION, MAX_CONTENT_CHARS, parse_output
from pats.envs.search_qa.retrievers import Bm25Retriever, HttpRetriever
from pats.errors import EnvironmentFault, PrerequisiteError
from pats.protocols import Env
from pats.registry import ENVIRONMENTS
from pats.spec import load_spec
from pats.spec.environments import Bm25RetrieverSpec, HttpRetrieverSpec, SearchQaEnvSpec

REPO = Path(__file__).resolve().parents[1]

# Made-up facts, so no real-world knowledge answers them; every fact ends "... is <answer>." and the
# distractors share words with the questions, so a wrong ranking gives a wrong answer.
FACTS = {
    "Zorblat Kingdom": ("The capital of the Zorblat Kingdom is Quenvira.", "What is the capital of the Zorblat Kingdom?"),
    "Mirelle Dantry": ("The birthplace of the painter Mirelle Dantry is Ostrevan.", "Where was the painter Mirelle Dantry born?"),
    "Glimmerfen River": ("The longest tributary of the Glimmerfen River is Tovask.", "What is the longest tributary of the Glimmerfen River?"),
    "Pellucid Engine": ("The inventor of the Pellucid Engine is Hadrik Sollow.", "Who is the inventor of the Pellucid Engine?"),
}  # fmt: skip
DISTRACTORS = {
    "Freedonia": "The capital of Freedonia is Fredville.",
    "Kingdom of Arlen": "The largest port of the Kingdom of Arlen is Marrow.",
    "River Osk": "The longest bridge over the River Osk is Calder.",
    "Steam engine": "The best known builder of an engine of this kind is Watt.",
}


@pytest.fixture
def corpus(tmp_path) -> Path:
    rows = [{"title": t, "text": f} for t, (f, _) in FACTS.items()] + [
        {"title": t, "text": f} for t, f in DISTRACTORS.items()
    ]
    path = tmp_path / "corpus.jsonl"
    lines = [
        json.dumps({"id": str(i), "contents": f'"{r["title"]}"\n{r["text"]}'}) for i, r in enumerate(rows)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def questions(tmp_path) -> Path:
    path = tmp_path / "made_up" / "questions.jsonl"
    path.parent.mkdir()
    rows = [
        {"question": q, "golden_answers": [f.rsplit(" is ", 1)[1].rstrip(".")]} for f, q in FACTS.values()
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def make_env(questions: Path, retriever, **kw) -> SearchQaEnv:
    return SearchQaEnv(
        SearchQaEnvSpec(train_data=[str(questions)], eval_data=[str(questions)], retriever=retriever, **kw)
    )


def bm25(corpus: Path, top_k: int = 3) -> Bm25RetrieverSpec:
    return Bm25RetrieverSpec(corpus=str(corpus), top_k=top_k)


async def scripted_searcher(env: SearchQaEnv, task) -> tuple[list, str]:
    """Search the question, read the answer off the top passage ('... is X.'), answer it."""
    first = await env.reset(task)
    assert first.observation == f"Question: {task.payload['question']}" and not first.done
    found = await env.step(
        f"<think>I should look this up.</think>\n<search> {task.payload['question']} </search>"
    )
    top = re.search(r"Doc 1\(Title: [^)]*\) (.*)", found.observation).group(1)
    answer = top.rsplit(" is ", 1)[1].rstrip(".")
    final = await env.step(f"<think>Doc 1 says it.</think><answer> {answer} </answer>")
    return [first, found, final], answer


# --- answers -------------------------------------------------------------------------------------------


def test_normalization_is_search_r1s():
    assert normalize_answer("  The Eiffel   Tower! ") == "eiffel tower"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("Rock-'n'-Roll") == "rocknroll"  # punctuation removed, not spaced
    assert normalize_answer("Theater") == "theater"  # articles only as whole words


def test_exact_match_and_f1():
    gold = ["14 December 1972 UTC", "December 1972"]
    assert exact_match("december 1972.", gold) and f1("december 1972.", gold) == 1.0
    assert not exact_match("in December 1972", gold)
    assert f1("in December 1972", gold) == pytest.approx(0.8)  # p 2/3, r 1 against "December 1972"
    assert f1("Paris", gold) == 0.0 and f1("", gold) == 0.0 and f1("x", []) == 0.0
    assert not exact_match("", gold)


# --- parsing the policy's output ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "output, kind, content, reason",
    [
        ("<search>capital of France</search>", "search", "capital of France", ""),
        ("<think>hmm</think>\n<answer>\n Paris \n</answer>", "answer", "Paris", ""),
        ("<answer>Paris</answer> then <search>more</search>", "answer", "Paris", ""),  # the first tag wins
        ("<search>q1</search><search>q2</search>", "search", "q1", ""),
        ("", None, "", "empty output"),
        ("   \n\t", None, "", "empty output"),
        ("\x00\xff garbage ###", None, "", "no <search>"),
        ("The answer is Paris.", None, "", "no <search>"),
        ("<search>capital of France", None, "", "<search> without </search>"),
        ("<Search>q</Search>", None, "", "no <search>"),  # Search-R1's tags are case-sensitive
        ("<search>q</answer>", None, "", "<search> without </search>"),
        ("<answer>   </answer>", None, "", "empty <answer>"),
        ("<search>" + "w " * MAX_CONTENT_CHARS + "</search>", None, "", "over-long search"),
    ],
)
def test_parse_output(output, kind, content, reason):
    action = parse_output(output)
    assert (action.kind, action.content) == (kind, content)
    assert reason in action.reason and bool(action.reason) == bool(reason)


# --- question files ------------------------------------------------------------------------------------------

SHARED_QA = {  # every file under ../shared/data/qa: rows and dataset
    "agentic_rag/nq/test.jsonl": (3610, "nq"),
    "agentic_rag/hotpot_qa/test.jsonl": (7405, "hotpotqa"),
    "agentic_rag/musique/test.jsonl": (2417, "musique"),
    "agentic_rag/2wikimultihop_qa/test.parquet": (12576, "2wikimultihopqa"),
    "agentic_rag/2wikimultihop_qa/2wikimultihop_test_questions_and_answers.json": (12576, "2wikimultihopqa"),
    "graphrag_r2/popqa/train.parquet": (800, "popqa"),
}


def test_every_shared_question_file_loads(shared_data):
    on_disk = {str(p.relative_to(shared_data / "qa")) for p in (shared_data / "qa").rglob("*") if p.is_file()}
    assert on_disk == set(SHARED_QA), "a new file in shared/data/qa: add it here with its row count"
    for name, (rows, dataset) in SHARED_QA.items():
        loaded = load_questions(shared_data / "qa" / name)
        assert len(loaded) == rows, name
        assert {q.dataset for q in loaded} == {dataset}, name
        assert all(q.question.strip() and q.answers and all(a.strip() for a in q.answers) for q in loaded), (
            name
        )


def test_shared_files_give_the_right_fields(shared_data):
    nq = load_questions(shared_data / "qa/agentic_rag/nq/test.jsonl")[0]
    assert nq.question == "when was the last time anyone was on the moon"
    assert nq.answers == ("14 December 1972 UTC", "December 1972")  # the list, not the joined string
    popqa = load_questions(shared_data / "qa/graphrag_r2/popqa/train.parquet")[0]
    assert (popqa.question, popqa.answers) == ("What is Ludwig Lichtschein's occupation?", ("rabbi",))
    wiki_json, wiki_parquet = (
        load_questions(shared_data / "qa/agentic_rag/2wikimultihop_qa" / n)
        for n in ("2wikimultihop_test_questions_and_answers.json", "test.parquet")
    )
    assert [(q.question, q.answers) for q in wiki_json] == [(q.question, q.answers) for q in wiki_parquet]
    flashrag = load_questions(shared_data / "corpus/flashrag_nq_sample17.jsonl")  # question + golden_answers
    assert len(flashrag) == 17 and flashrag[0].answers == ("Wilhelm Conrad Röntgen",)


@pytest.mark.parametrize(
    "row, answers",
    [
        ({"question": "q", "answer": "a"}, ("a",)),
        ({"question": "q", "answers": ["a", "b"]}, ("a", "b")),
        ({"question": "q", "possible_answers": '["a", "b"]'}, ("a", "b")),  # PopQA's JSON-string list
        ({"question": "q", "golden_answers": [1972]}, ("1972",)),
        ({"extra_info": {"question": "q"}, "reward_model": {"ground_truth": {"target": ["a"]}}}, ("a",)),
        ({"question": "q", "reward_model": '{"ground_truth": {"target": "a"}}'}, ("a",)),
        ({"question": "q", "answer": "", "golden_answers": ["a"]}, ("a",)),  # empty fields are skipped
    ],
)
def test_field_variants(write, row, answers):
    assert load_questions(write("d.jsonl", json.dumps(row)))[0].answers == answers


def test_dataset_names():
    assert qa_data.dataset_name("google-research-datasets/nq_open") == "nq"
    assert qa_data.dataset_name("voidful/2WikiMultihopQA") == "2wikimultihopqa"
    assert qa_data.dataset_name("hotpot_qa") == "hotpotqa"
    assert qa_data.dataset_name("questions") is None


def test_dataset_from_data_source_then_path(write):
    path = write("mine/nq/dev.jsonl", "\n".join(json.dumps(r) for r in [
        {"question": "q", "answer": "a", "data_source": "hotpotqa"},
        {"question": "q", "answer": "a"},
        {"question": "q", "answer": "a", "data_source": "my/Own Set"},
    ]))  # fmt: skip
    assert [q.dataset for q in load_questions(path)] == ["hotpotqa", "nq", "nq"]
    other = write(
        "mine/stuff/dev.jsonl", json.dumps({"question": "q", "answer": "a", "data_source": "my/Own Set"})
    )
    assert load_questions(other)[0].dataset == "own_set"


def test_bad_question_files_name_the_file_and_the_fields(write, tmp_path):
    path = write("bad.jsonl", json.dumps({"question": "q", "label": "x", "meta": {"gold": "a"}}))
    with pytest.raises(PrerequisiteError) as info:
        load_questions(path)
    message = str(info.value)
    assert str(path) in message and "row 0 has no golden answers" in message
    assert "question, label, meta, meta.gold" in message and "golden_answers" in message
    with pytest.raises(PrerequisiteError, match="has no question"):
        load_questions(write("noq.jsonl", json.dumps({"prompt": "q", "answer": "a"})))
    with pytest.raises(PrerequisiteError, match=r"broken\.jsonl:2: not a JSON line"):
        load_questions(write("broken.jsonl", '{"question": "q", "answer": "a"}\n{oops\n'))
    with pytest.raises(PrerequisiteError, match="unknown question file type"):
        load_questions(write("d.csv", "question,answer\n"))
    with pytest.raises(PrerequisiteError, match="no question file at"):
        load_questions(tmp_path / "missing.jsonl")
    with pytest.raises(PrerequisiteError, match="list of records"):
        load_questions(write("d.json", '{"question": "q"}'))


# --- tasks -------------------------------------------------------------------------------------------------


def test_tasks_are_capped_in_a_fixed_order(shared_data, corpus):
    nq, hotpot = (str(shared_data / "qa/agentic_rag" / p / "test.jsonl") for p in ("nq", "hotpot_qa"))
    spec = SearchQaEnvSpec(
        train_data=[nq], eval_data=[nq, hotpot], retriever=bm25(corpus), num_train_tasks=5, num_eval_tasks=400
    )
    env = SearchQaEnv(spec)
    train, evals = env.tasks("train"), env.tasks("eval")
    assert len(train) == 5 and len(evals) == 400
    # Pinned: the order is a hash of the task ids, the same on every machine and Python version.
    assert [t.id for t in train[:2]] == ["search_qa:train:nq:test:2827", "search_qa:train:nq:test:3115"]
    assert train[0].payload["question"] == "why was the plague that struck athens so devastating"
    assert [t.id for t in SearchQaEnv(spec).tasks("train")] == [t.id for t in train]
    assert {t.type for t in evals} == {"nq", "hotpotqa"}  # interleaved, not the first file first
    assert len({t.id for t in evals}) == 400 and all(
        t.env == "search_qa" and t.split == "eval" for t in evals
    )
    assert set(t.id for t in train).isdisjoint(t.id for t in evals)
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        env.tasks("dev")


def test_files_that_collide_are_refused(write, corpus):
    a = write("a/nq/test.jsonl", json.dumps({"question": "q", "answer": "a"}))
    b = write("b/nq/test.jsonl", json.dumps({"question": "q2", "answer": "b"}))
    spec = SearchQaEnvSpec(train_data=[str(a), str(b)], eval_data=[str(a)], retriever=bm25(corpus))
    with pytest.raises(PrerequisiteError, match="environment.train_data: two files named 'test'"):
        SearchQaEnv(spec).tasks("train")


# --- episodes with bm25 ----------------------------------------------------------------------------------


def test_registered_and_protocol(questions, corpus):
    import pats.envs.search_qa  # noqa: F401  (registers the environment)

    env = ENVIRONMENTS.get("search_qa")(
        SearchQaEnvSpec(train_data=[str(questions)], eval_data=[str(questions)], retriever=bm25(corpus))
    )
    assert isinstance(env, SearchQaEnv) and isinstance(env, Env) and env.parses_output


async def test_scripted_searcher_gets_exact_match_1(questions, corpus):
    env = make_env(questions, bm25(corpus))
    tasks = env.tasks("train")
    # No known dataset in the path or a data_source: the type is the file name.
    assert len(tasks) == len(FACTS) and {t.type for t in tasks} == {"questions"}
    for task in tasks:
        (first, found, final), answer = await scripted_searcher(env, task)
        assert found.observation.startswith("<information>Doc 1(Title: ") and found.observation.endswith(
            "</information>"
        )
        assert found.observation.count("Doc ") == 3 and found.valid and not found.done and found.reward == 0
        assert answer == task.payload["answers"][0]
        assert (final.reward, final.won, final.score, final.done, final.valid) == (1.0, True, 1.0, True, True)
        assert env.searches == [task.payload["question"]]
        with pytest.raises(RuntimeError, match="ended"):
            await env.step("<answer>again</answer>")
    await env.close()


async def test_a_retriever_that_ranks_wrong_fails_the_searcher(questions, tmp_path):
    # Only distractors in the corpus: the searcher answers what Doc 1 says, and it is wrong.
    path = tmp_path / "distractors.jsonl"
    path.write_text(
        "".join(json.dumps({"id": t, "contents": f'"{t}"\n{f}'}) + "\n" for t, f in DISTRACTORS.items())
    )
    env = make_env(questions, bm25(path))
    (_, _, final), _ = await scripted_searcher(env, env.tasks("train")[0])
    assert (final.reward, final.won, final.done) == (0.0, False, True)


async def test_f1_reward_and_partial_answers(questions, corpus):
    env = make_env(questions, bm25(corpus), reward="f1")
    task = next(t for t in env.tasks("train") if t.payload["answers"] == ["Hadrik Sollow"])
    await env.reset(task)
    result = await env.step("<answer>Sollow</answer>")
    assert (result.won, result.done) == (False, True)
    assert result.score == pytest.approx(2 / 3) and result.reward == pytest.approx(2 / 3)
    em = make_env(questions, bm25(corpus))
    await em.reset(task)
    result = await em.step("<answer>the Sollow</answer>")
    assert (result.reward, result.score) == (0.0, pytest.approx(2 / 3))


async def test_expert_plan_wins(questions, corpus):
    env = make_env(questions, bm25(corpus))
    for task in env.tasks("eval"):
        plan = env.expert_plan(task)
        assert plan == [
            f"<search>{task.payload['question']}</search>",
            f"<answer>{task.payload['answers'][0]}</answer>",
        ]
        await env.reset(task)
        results = [await env.step(action) for action in plan]
        assert results[-1].won and results[-1].done


@pytest.mark.parametrize(
    "output, reason",
    [
        ("", "empty output"),
        ("\x00\x01\x02 ~~~ ]]]", "no <search>"),
        ("I think the answer is Quenvira.", "no <search>"),
        ("<search>" + "capital " * 200 + "</search>", "over-long search"),
        ("<answer>" + "x" * 10_000 + "</answer>", "over-long answer"),
        ("<search>capital of the Zorblat Kingdom", "<search> without </search>"),
        ("<search></search>", "empty <search>"),
    ],
)
async def test_bad_output_is_an_invalid_step_not_a_crash(questions, corpus, output, reason):
    env = make_env(questions, bm25(corpus))
    task = env.tasks("train")[0]
    await env.reset(task)
    result = await env.step(output)
    assert (result.valid, result.done, result.reward, result.won) == (False, False, 0.0, False)
    assert reason in result.invalid_reason and result.observation == INVALID_OBSERVATION
    assert result.task_description == task.payload["question"] and env.searches == []
    after = await env.step(f"<answer>{task.payload['answers'][0]}</answer>")  # the episode goes on
    assert after.won and after.done


async def test_step_before_reset_and_wrong_env(questions, corpus):
    env = make_env(questions, bm25(corpus))
    with pytest.raises(RuntimeError, match="before reset"):
        await env.step("<answer>x</answer>")
    task = env.tasks("train")[0].model_copy(update={"env": "twx"})
    with pytest.raises(ValueError, match="not 'search_qa'"):
        await env.reset(task)


async def test_missing_corpus_names_the_field(questions, tmp_path):
    env = make_env(questions, bm25(tmp_path / "nope.jsonl"))
    await env.reset(env.tasks("train")[0])
    with pytest.raises(PrerequisiteError, match="environment.retriever.corpus: no file at"):
        await env.step("<search>anything</search>")


def test_bm25_index_is_built_once_per_corpus(corpus):
    a, b = Bm25Retriever(bm25(corpus)), Bm25Retriever(bm25(corpus, top_k=1))
    assert a.index is b.index
    assert [p.id for p in b.search("inventor of the Pellucid Engine")] == ["3"]
    assert len(a.search("the")) == 3  # nothing but stop words still answers top-k


# --- the HTTP retriever against real local servers -------------------------------------------------------


@contextmanager
def serve(respond: Callable[[dict], tuple[int, bytes]]) -> Iterator[tuple[str, list[dict]]]:
    """An HTTP server on 127.0.0.1 whose POST /retrieve answers respond(body); yields (url, bodies)."""
    bodies: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            status, payload = respond(body) if self.path == "/retrieve" else (404, b"not found")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args):  # keep pytest's output clean
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/retrieve", bodies
    finally:
        server.shutdown()
        server.server_close()


def search_r1_server(corpus: Path) -> Callable[[dict], tuple[int, bytes]]:
    """Search-R1's retrieval_server.py answer shape, over the bm25 index of `corpus`."""
    index = Bm25Retriever(bm25(corpus)).index

    def respond(body: dict) -> tuple[int, bytes]:
        result = [
            [
                {"document": {"id": p.id, "contents": p.contents}, "score": p.score}
                for p in index.search(q, body["topk"])
            ]
            for q in body["queries"]
        ]
        return 200, json.dumps({"result": result}).encode()

    return respond


def http(url: str, **kw) -> HttpRetrieverSpec:
    return HttpRetrieverSpec(url=url, **{"backoff_s": 0.01, **kw})


async def test_http_retriever_matches_bm25_and_the_searcher_wins(questions, corpus):
    with serve(search_r1_server(corpus)) as (url, bodies):
        client = HttpRetriever(http(url, top_k=2))
        local = Bm25Retriever(bm25(corpus, top_k=2))
        query = "capital of the Zorblat Kingdom"
        assert client.search(query) == local.search(query)
        assert bodies[0] == {"queries": [query], "topk": 2, "return_scores": True}
        env = make_env(questions, http(url))
        for task in env.tasks("train"):
            (_, _, final), _ = await scripted_searcher(env, task)
            assert final.won and final.reward == 1.0


async def test_http_retriever_retries_a_flaky_server(questions, corpus):
    answer, calls = search_r1_server(corpus), []

    def flaky(body):
        calls.append(time.monotonic())
        return (503, b"busy") if len(calls) <= 2 else answer(body)

    with serve(flaky) as (url, _):
        client = HttpRetriever(http(url, max_retries=3, backoff_s=0.05))
        assert client.search("capital of the Zorblat Kingdom")[0].id == "0"
        assert client.attempts == 3
        assert calls[1] - calls[0] >= 0.05 and calls[2] - calls[1] >= 0.1  # exponential backoff


async def test_a_server_that_keeps_failing_is_an_environment_fault(questions, corpus):
    with serve(lambda body: (500, b"boom")) as (url, bodies):
        env = make_env(questions, http(url, max_retries=2))
        await env.reset(env.tasks("train")[0])
        with pytest.raises(EnvironmentFault, match=r"failed 3 times \(HTTP 500; HTTP 500; HTTP 500\)"):
            await env.step("<search>capital</search>")
        assert len(bodies) == 3


async def test_a_server_that_times_out_is_an_environment_fault(questions, corpus):
    release, answered = threading.Event(), []

    def slow(body):  # holds each answer until the test lets go (30 s at most, should the client wait)
        release.wait(30.0)
        answered.append(body)
        return 200, b'{"result": [[]]}'

    with serve(slow) as (url, bodies):
        env = make_env(questions, http(url, timeout_s=0.2, max_retries=1))
        await env.reset(env.tasks("train")[0])
        with pytest.raises(EnvironmentFault, match="failed 2 times .*timed out"):
            await env.step("<search>capital</search>")
        # both tries gave up while the server still held their answers: the timeout, not the server, ended them
        assert len(bodies) == 2 and answered == []
        release.set()


async def test_no_server_and_wrong_answers_are_environment_faults(questions, corpus):
    with serve(lambda body: (200, b"{}")) as (url, _):
        closed = url  # the port is free again after the server closes
    env = make_env(questions, http(closed, max_retries=1))
    await env.reset(env.tasks("train")[0])
    with pytest.raises(EnvironmentFault, match="failed 2 times .*is it running"):
        await env.step("<search>capital</search>")

    with serve(lambda body: (200, b'{"results": []}')) as (url, bodies):
        env = make_env(questions, http(url))
        await env.reset(env.tasks("train")[0])
        with pytest.raises(EnvironmentFault, match="other than Search-R1's"):
            await env.step("<search>capital</search>")
        assert len(bodies) == 1  # a malformed answer is not retried

    with serve(lambda body: (200, b"{}")) as (url, bodies):
        env = make_env(questions, http(url.replace("/retrieve", "/search")))
        await env.reset(env.tasks("train")[0])
        with pytest.raises(EnvironmentFault, match="HTTP 404"):
            await env.step("<search>capital</search>")
        assert len(bodies) == 1  # a wrong URL is not retried


# --- the shipped spec on the shared data -------------------------------------------------------------------


async def test_shipped_spec_plays_on_shared_data(shared_data, monkeypatch):
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PATS_DATA", str(shared_data))
    spec = load_spec(REPO / "experiments/search_qa/pats.yaml")
    env = ENVIRONMENTS.get("search_qa")(spec.environment)
    train, evals = env.tasks("train"), env.tasks("eval")
    assert len(train) == 800 and {t.type for t in train} == {"popqa"}
    assert len(evals) == spec.environment.num_eval_tasks and {t.type for t in evals} == {"nq", "hotpotqa"}
    await env.reset(evals[0])
    found = await env.step(f"<search>{evals[0].payload['question']}</search>")
    assert found.valid and found.observation.count("Doc ") == spec.environment.retriever.top_k
