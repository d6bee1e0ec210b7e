"""A scripted OpenAI-compatible chat-completions server on 127.0.0.1, for offline tests of LLM code.

It answers `POST /v1/chat/completions` from a script, one item per request, in order, and lists one
model on `GET /v1/models`. It is a real HTTP server, so a test exercises the whole client stack
(DSPy, LiteLLM or the OpenAI SDK, HTTP, retries) rather than a mock of it. Script items:

- `"text"`: a normal answer with that content;
- `{"status": 429, "retry_after": 0.1}`: an error response (any status), with a Retry-After header
  when `retry_after` is given (`message` and `kind` set the error body's text and type);
- `{"delay": 5.0}`: sleep first (longer than the client's timeout to provoke one), then answer
  `item["text"]` (default "");
- `{"malformed": True}`: status 200 with a body that is not JSON;
- `{"truncated": True}`: a body cut short of its Content-Length, then the connection closes;
- a callable: called with the request body (a dict), returns one of the above.

Requests after the script ran out get status 500 and count in `exhausted`. Every request body is kept in
`requests` (parsed JSON) for assertions, and `max_in_flight` is the most requests handled at once. Its
own log, to hold a client's counts against: `answered` has one `Answered` per request it handled (the
preflight and probe included), with the status and the tokens its `usage` reported. The usage is
counted, roughly as a tokenizer would: words and punctuation of the prompt's messages and the answer.

Structured output: by default (`structured=False`) it is a server without schema support that refuses
the field (`transformers serve` 5.10 ignores it instead, with a warning; its probe answer is then
prose, which turns structured output off just the same): every request carrying a `response_format`,
the probe (a prompt starting `pats.lm.probe.PROBE_PREFIX`) included, gets a 400 before the script, consuming
nothing; so an LLM on `structured: auto` talks to it in DSPy's free-form fields, as the scripts are
written. With `structured=True` it is a server that takes the field: the probe (kept in `probes`,
consuming nothing) gets the `probe` item (default: the JSON object its prompt asks for, as a server
that enforced the schema would answer), and requests carrying a `response_format` are answered from
the script (write those items as the JSON object the schema asks for).

`pats run`'s preflight request (`pats.llm_check.PREFLIGHT_PROMPT`) is answered with the `preflight`
item (default "ok") and kept in `preflights`, never in `requests`: it consumes no script item, so a
script written for the review's calls stays in step. Like a real server, it can refuse keys and
models: with `api_key` set, a request without `Authorization: Bearer <api_key>` gets 401; with `models`
set, a request for another model gets 404. Both are answered before the script (and the preflight), and
consume nothing.

    with ScriptedOpenAIServer(["hello"]) as server:
        lm = dspy.LM("openai/any", api_base=server.base_url, api_key="dummy")
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NamedTuple

from pats.llm_check import PREFLIGHT_PROMPT
from pats.lm.probe import PROBE_PREFIX

ScriptItem = str | dict[str, Any] | Callable[[dict[str, Any]], "str | dict[str, Any]"]
_TOKEN = re.compile(r"\w+|[^\w\s]")


class Answered(NamedTuple):
    """One request the server handled, as its log has it: the status sent and the tokens reported."""

    status: int
    tokens: int  # prompt + completion tokens in the body's usage (0 for an error or a broken body)
    kind: str  # "preflight", "probe" or "script"
    completion_tokens: int = 0  # of the tokens, the answer's (the rest are the prompt's)


def count_tokens(text: str) -> int:
    """Words and punctuation marks: the scripted server's stand-in for a tokenizer."""
    return len(_TOKEN.findall(text))


class ScriptedOpenAIServer:
    def __init__(
        self,
        script: Iterable[ScriptItem] = (),
        *,
        model: str = "scripted",
        preflight: ScriptItem = "ok",
        api_key: str | None = None,
        models: Iterable[str] | None = None,
        structured: bool = False,
        probe: ScriptItem | None = None,
        refused_keywords: Iterable[str] = (),
    ):
        self.script: list[ScriptItem] = list(script)
        self.structured = structured  # False: refuses response_format with a 400
        self.probe = probe  # a structured server's answer to the probe (None: the object it asks for)
        # JSON-schema keywords a structured server refuses (400), as a provider's strict mode refuses
        # `prefixItems` or `const`: every request whose response_format uses one, the probe included.
        self.refused_keywords = tuple(refused_keywords)
        self.model = model
        self.preflight = preflight  # the answer to every preflight request
        self.api_key = api_key  # None: any key (or none) is accepted
        self.models = set(models) if models is not None else None  # None: every model is served
        self.requests: list[dict[str, Any]] = []
        self.preflights: list[dict[str, Any]] = []
        self.probes: list[dict[str, Any]] = []
        self.answered: list[Answered] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.exhausted = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()  # wakes delayed handlers on shutdown
        self._connections: set[socket.socket] = set()  # open keep-alive connections, closed on stop
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        self._stop.clear()
        handler = type("Handler", (_Handler,), {"server_double": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: a free port
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.05,), name="scripted-openai", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        with self._lock:
            connections, self._connections = list(self._connections), set()
        for conn in connections:  # unblocks handler threads waiting on idle keep-alive connections
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        if self._httpd is None:
            raise RuntimeError("the server is not running; use it as a context manager or call start()")
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # -- script ----------------------------------------------------------------------------------------

    def add(self, *items: ScriptItem) -> None:
        with self._lock:
            self.script.extend(items)

    def prompts(self) -> list[str]:
        """The text of all messages of each recorded request, joined, in request order."""
        return ["\n".join(_content(m) for m in body.get("messages", [])) for body in self.requests]

    def _next(self, body: dict[str, Any], authorization: str | None) -> dict[str, Any] | None:
        refusal = self._refusal(body, authorization)
        if refusal is None and _is_preflight(body):
            with self._lock:
                self.preflights.append(body)
            item = self.preflight
        elif refusal is None and _is_probe(body):
            with self._lock:
                self.probes.append(body)
            if not self.structured:
                return _NO_SCHEMA
            if (refused := self._schema_refusal(body)) is not None:
                return refused
            item = self.probe if self.probe is not None else _asked_object(body)
        elif refusal is None and not self.structured and body.get("response_format") is not None:
            with self._lock:
                self.requests.append(body)
            return _NO_SCHEMA
        else:
            refusal = refusal or self._schema_refusal(body)
            with self._lock:
                self.requests.append(body)
                if refusal is not None:
                    return refusal
                if not self.script:
                    self.exhausted += 1
                    return None
                item = self.script.pop(0)
        if callable(item):
            item = item(body)
        return {"text": item} if isinstance(item, str) else dict(item)

    def _refusal(self, body: dict[str, Any], authorization: str | None) -> dict[str, Any] | None:
        """The 401 or 404 a real server would answer for a wrong key or an unknown model, else None."""
        if self.api_key is not None and authorization != f"Bearer {self.api_key}":
            return {"status": 401, "message": "Incorrect API key provided", "kind": "invalid_api_key"}
        model = str(body.get("model"))
        if self.models is not None and model not in self.models:
            return {"status": 404, "message": f"The model `{model}` does not exist.", "kind": "NotFoundError"}
        return None

    def _schema_refusal(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """The 400 for a response_format whose schema uses a keyword this server refuses, else None."""
        schema = json.dumps(body.get("response_format") or {})
        refused = [k for k in self.refused_keywords if f'"{k}"' in schema]
        if not refused:
            return None
        return {
            "status": 400,
            "message": f"Invalid schema for response_format: keyword '{refused[0]}' is not supported",
            "kind": "invalid_request_error",
        }

    def _log(self, status: int, tokens: int, body: dict[str, Any], completion_tokens: int = 0) -> None:
        kind = "preflight" if _is_preflight(body) else "probe" if _is_probe(body) else "script"
        with self._lock:
            self.answered.append(Answered(status, tokens, kind, completion_tokens))

    def _enter(self) -> None:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1


def _is_preflight(body: dict[str, Any]) -> bool:
    return any(_content(m).strip() == PREFLIGHT_PROMPT for m in body.get("messages", []))


def _is_probe(body: dict[str, Any]) -> bool:
    return any(_content(m).strip().startswith(PROBE_PREFIX) for m in body.get("messages", []))


def _asked_object(body: dict[str, Any]) -> str:
    """The JSON object a probe's prompt asks for ("... answer with the JSON object {...}.")."""
    text = next(_content(m).strip() for m in body["messages"] if _content(m).strip().startswith(PROBE_PREFIX))
    return text[text.index("{") : text.rindex("}") + 1]


# What a server without schema support says to a response_format (vLLM-style 400 body).
_NO_SCHEMA = {
    "status": 400,
    "message": "response_format is not supported by this server",
    "kind": "invalid_request_error",
}


def _content(message: dict[str, Any]) -> str:
    content = message.get("content", "")
    if isinstance(content, list):  # content parts
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def completion(text: str, model: str, prompt: str = "") -> dict[str, Any]:
    """An OpenAI chat-completion body answering `text`, its usage counted by `count_tokens`."""
    prompt_tokens, completion_tokens = count_tokens(prompt), count_tokens(text)
    return {
        "id": f"chatcmpl-scripted-{time.monotonic_ns()}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class _Handler(BaseHTTPRequestHandler):
    server_double: ScriptedOpenAIServer
    protocol_version = "HTTP/1.1"  # keep-alive, as the OpenAI clients expect

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass

    def setup(self) -> None:
        super().setup()
        with self.server_double._lock:
            self.server_double._connections.add(self.connection)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            with self.server_double._lock:
                self.server_double._connections.discard(self.connection)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            double = self.server_double
            models = sorted(double.models) if double.models is not None else [double.model]
            data = [{"id": m, "object": "model", "owned_by": "pats"} for m in models]
            self._send(200, {"object": "list", "data": data})
        else:
            self._send(404, _error(f"no route GET {self.path}", "not_found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, _error(f"no route POST {self.path}", "not_found"))
            return
        try:
            body = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            self._send(400, _error("request body is not JSON", "invalid_request_error"))
            return
        double = self.server_double
        double._enter()
        try:
            self._answer(double, double._next(body, self.headers.get("Authorization")), body)
        finally:
            double._leave()

    def _answer(self, double: ScriptedOpenAIServer, item: dict[str, Any] | None, body: dict) -> None:
        if item is None:
            double._log(500, 0, body)
            self._send(500, _error("ScriptedOpenAIServer: script exhausted", "server_error"))
            return
        if item.get("delay"):
            double._stop.wait(float(item["delay"]))
        model = str(body.get("model") or double.model)
        prompt = "\n".join(_content(m) for m in body.get("messages", []))
        if "status" in item:
            double._log(int(item["status"]), 0, body)
            status = int(item["status"])
            headers = {}
            if item.get("retry_after") is not None:
                seconds = float(item["retry_after"])
                headers["Retry-After"] = f"{seconds:g}"
                headers["retry-after-ms"] = str(int(seconds * 1000))
            message = item.get("message", f"scripted error {status}")
            kind = item.get("kind") or ("rate_limit_exceeded" if status == 429 else "server_error")
            self._send(status, _error(message, kind), headers)
        elif item.get("malformed"):
            double._log(200, 0, body)
            self._send_raw(200, b'{"id": "chatcmpl-broken", "choices": [ this is not json')
        elif item.get("truncated"):
            double._log(200, 0, body)
            data = json.dumps(completion(str(item.get("text", "")), model, prompt)).encode()
            self.close_connection = True
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))  # promises more than is sent
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data[: len(data) // 2])
            except (BrokenPipeError, ConnectionResetError):
                pass
        else:
            answer = completion(str(item.get("text", "")), model, prompt)
            usage = answer["usage"]
            double._log(200, usage["total_tokens"], body, usage["completion_tokens"])
            self._send(200, answer)

    def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), headers)

    def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a provoked timeout)


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": kind, "param": None}}
