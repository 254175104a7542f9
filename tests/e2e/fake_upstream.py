"""A scripted OpenAI-compatible upstream for cpuos-gateway, over real HTTP: the gateway's only test
double. Like fake_openai.FakeOpenAI, but it answers whole or streamed (server-sent events in
chunks, tool-call arguments in pieces, as real servers stream them), can fail or stall on purpose,
and serves GET /v1/models.

A script maps a request body to the next assistant turn: ("tool", code) calls run_python,
("call", name, arguments) any tool, ("calls", [(name, arguments), ...]) several at once,
("text", text) answers; "calls" may add the text the model says before its calls:
("calls", [...], "Let me look."). Every request is recorded in
`requests` as (headers with lowercase names, body)."""

import json
import re
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fake_openai import ANALYSIS_CODE

MODELS = {"object": "list", "data": [{"id": "fake-model", "object": "model", "owned_by": "test"}]}


def last_tool_result(body):
    """The last message's content parsed as the tool's JSON output, or None if it is no tool result."""
    messages = body.get("messages") or []
    if not messages or messages[-1].get("role") != "tool":
        return None
    try:
        return json.loads(messages[-1].get("content") or "")
    except ValueError:
        return {}


def seed003(body):
    """Seed 003's model: runs the analysis, then names the month the tool printed."""
    result = last_tool_result(body)
    if result is None:
        return ("tool", ANALYSIS_CODE)
    m = re.search(r"GREW_MOST (\S+) (\S+)", result.get("stdout") or "")
    if m:
        return ("text", f"Revenue grew the most in {m.group(1)} (+{m.group(2)}). "
                        "The chart is /work/chart.png.")
    return ("text", f"The analysis failed: {json.dumps(result)[-500:]}")


def run_then_answer(code):
    """Runs code once, then answers "stdout: <what it printed>"."""
    def script(body):
        result = last_tool_result(body)
        if result is None:
            return ("tool", code)
        return ("text", "stdout: " + (result.get("stdout") or "") + "error: " +
                json.dumps(result.get("error")))
    return script


def loop(code):
    """A model that never stops calling the tool."""
    return lambda body: ("tool", code)


def text(answer):
    """A model that answers text at once, no tool call (no sandbox involved)."""
    return lambda body: ("text", answer)


class FakeUpstream:
    """`with FakeUpstream(script) as fake:`; `fake.base_url` ends in /v1.

    status: answer chat requests with that HTTP error, all of them or those after the first
    fail_after; delay: seconds before answering."""

    def __init__(self, script=seed003, status=None, fail_after=0, delay=0.0):
        self.script, self.status, self.fail_after, self.delay = script, status, fail_after, delay
        self.requests = []
        self._lock = threading.Lock()
        self._calls = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()

    def bodies(self):
        with self._lock:
            return [b for _, b in self.requests]

    def turn(self, body):
        """The assistant message and finish reason for a request body."""
        action = self.script(body)
        if action[0] == "text":
            return {"role": "assistant", "content": action[1]}, "stop"
        calls = {"tool": [("run_python", json.dumps({"code": action[1]}))],
                 "call": [action[1:]], "calls": action[1] if action[0] == "calls" else []}[action[0]]
        names = [t.get("function", {}).get("name") for t in body.get("tools") or []]
        for name, _ in calls:
            if name not in names:
                return {"role": "assistant", "content": f"I have no tool {name}."}, "stop"
        tool_calls = []
        for name, arguments in calls:
            with self._lock:
                self._calls += 1
                call_id = f"call_{self._calls}"
            tool_calls.append({"id": call_id, "type": "function",
                               "function": {"name": name, "arguments": arguments}})
        content = action[2] if action[0] == "calls" and len(action) > 2 else None
        return {"role": "assistant", "content": content, "tool_calls": tool_calls}, "tool_calls"


def chunks(completion_id, model, message, finish, usage):
    """The chat.completion.chunk objects of a streamed answer, split as servers split them."""
    def chunk(delta, finish_reason=None):
        return {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": model, "choices": [{"index": 0, "delta": delta,
                                             "finish_reason": finish_reason}]}
    yield chunk({"role": "assistant", "content": ""})
    content = message.get("content") or ""
    for i in range(0, len(content), 7):
        yield chunk({"content": content[i:i + 7]})
    for index, call in enumerate(message.get("tool_calls") or []):
        fn = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": fn["name"], "arguments": ""}}]})
        for i in range(0, len(fn["arguments"]), 40):
            yield chunk({"tool_calls": [{"index": index,
                                         "function": {"arguments": fn["arguments"][i:i + 40]}}]})
    yield chunk({}, finish)
    if usage:
        yield {"id": completion_id, "object": "chat.completion.chunk", "created": int(time.time()),
               "model": model, "choices": [], "usage": usage}


def _handler(fake):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            # Headers and body leave in separate writes: without this, Nagle's
            # algorithm holds the second until the client's delayed ACK.
            self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args):
            pass

        def _send(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.rstrip("/") == "/v1/models":
                return self._send(200, MODELS)
            self._send(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/chat/completions":
                return self._send(404, {"error": {"message": f"no route {self.path}"}})
            try:
                body = json.loads(raw)
            except ValueError:
                return self._send(400, {"error": {"message": "invalid JSON"}})
            with fake._lock:
                fake.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                n = len(fake.requests)
            if fake.delay:
                time.sleep(fake.delay)
            if fake.status and n > fake.fail_after:
                return self._send(fake.status, {"error": {"message": "the model fell over",
                                                          "type": "server_error"}})
            message, finish = fake.turn(body)
            usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            model = body.get("model", "fake")
            if not body.get("stream"):
                return self._send(200, {
                    "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
                    "model": model, "choices": [{"index": 0, "message": message,
                                                 "finish_reason": finish, "logprobs": None}],
                    "usage": usage})
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            include = (body.get("stream_options") or {}).get("include_usage")
            events = [json.dumps(c) for c in chunks(f"chatcmpl-{n}", model, message, finish,
                                                    usage if include else None)] + ["[DONE]"]
            for e in events:
                data = f"data: {e}\n\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")

    return Handler
