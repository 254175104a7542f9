"""cpuos-gateway end to end: the real `openai` client downstream, the gateway, a real cpuosd with real
microVMs, and a scripted OpenAI-compatible upstream over real HTTP (fake_upstream.py).

Seed 003's question through the gateway with no tools of the caller's own; the conversation's
sandbox paused between requests and resumed by the next; streaming; the step cap; upstream and
cpuosd failures as OpenAI-style errors; keys and conversations kept apart. Tests that need no
sandbox use a conversation-less request or a tool call that never reaches one."""

import base64
import json
import os
import socket
import subprocess
import sys
import time

import openai
import pytest

from conftest import ROOT, SLOW, Gateway, free_port
from fake_openai import grew_most, png_size, sales_csv
from fake_upstream import FakeUpstream, last_tool_result, loop, run_then_answer, seed003, text

QUESTION = ("Load /work/sales.csv, plot revenue per month to /work/chart.png "
            "and tell me which month grew the most.")
CONV = "seed003-conversation"
MODEL = "qwen3-32b"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}


def client(gw, key=None):
    return openai.OpenAI(base_url=gw.url, api_key=key or gw.key_a, max_retries=0, timeout=900)


def ask(gw, content, conv=CONV, key=None, **kwargs):
    """One question as the plain openai client asks it, in conversation conv (None: none)."""
    return client(gw, key).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}],
        extra_headers={"X-Conversation-Id": conv} if conv else None, **kwargs)


def ext(resp):
    """The gateway's extension object of an answer or a chunk."""
    return resp.model_extra["cpuos"]


def output(step):
    return json.loads(step["output"])


def wait_state(daemon, sid, want):
    """The sandbox reaches state want: a pause or kill happens just after the answer went."""
    deadline, state = time.monotonic() + 120 * SLOW, None
    while time.monotonic() < deadline:
        state = daemon.http("GET", f"/v1/sandboxes/{sid}", unix=True).json().get("state")
        if state == want:
            return
        time.sleep(0.2)
    pytest.fail(f"sandbox {sid} is {state}, not {want}, after the request")


@pytest.fixture(scope="module")
def fake():
    with FakeUpstream(seed003) as f:
        yield f


@pytest.fixture(scope="module")
def gw(daemon, fake):
    g = Gateway(daemon, fake.base_url)
    try:
        yield g.start()
    finally:
        g.close()


@pytest.fixture(scope="module")
def first(gw, fake):
    """Seed 003's flow through the gateway: sales.csv put into the conversation's sandbox, then
    the question. (data, answer, the upstream requests it made)."""
    data = sales_csv()
    fake.script = seed003
    r = gw.http("PUT", f"/v1/conversations/{CONV}/files?path=/work/sales.csv", body=data,
                key=gw.key_a)
    assert r.status == 201, r
    assert r.json() == {"conversation_id": CONV, "path": "/work/sales.csv", "size": len(data)}
    n = len(fake.requests)
    resp = ask(gw, QUESTION)
    return data, resp, fake.requests[n:]


def test_seed003_question_gets_the_month_and_the_chart(first, gw):
    data, resp, upstream = first
    assert grew_most(data) == "2025-07"
    assert resp.choices[0].finish_reason == "stop"
    assert "2025-07" in resp.choices[0].message.content, resp
    x = ext(resp)
    assert x["conversation_id"] == CONV and x["stopped"] is None and x["sandbox_id"]
    [step] = x["steps"]
    out = output(step)
    assert out["exit_code"] == 0 and out["error"] is None, out
    assert "GREW_MOST 2025-07" in out["stdout"]
    assert out["results"][0].startswith("figure-1.png: <Figure"), out
    [art] = x["artifacts"]
    assert (art["name"], art["mime_type"], art["tool_call_id"]) == \
        ("figure-1.png", "image/png", step["tool_call_id"])
    head, b64 = art["url"].split(",", 1)
    assert head == "data:image/png;base64"
    width, height = png_size(base64.b64decode(b64))
    assert width > 0 and height > 0
    assert resp.usage.total_tokens == 30  # two upstream turns of 15

    # Upstream: the gateway's tool (the caller brought none), the upstream's key (not the
    # gateway key), and seed 003's tool message without any image in it.
    assert len(upstream) == 2
    (headers, body), (_, second) = upstream
    assert headers["authorization"] == f"Bearer {gw.upstream_key}"
    assert [t["function"]["name"] for t in body["tools"]] == ["run_python"]
    assert body["model"] == MODEL and "stream" not in body
    [tool] = [m for m in second["messages"] if m["role"] == "tool"]
    assert tool["tool_call_id"] == step["tool_call_id"] and tool["content"] == step["output"]
    assert b64[:40] not in tool["content"]


NEXT_CODE = ("import os\n"
             "print('chart', os.path.exists('/work/chart.png'), open('/work/chart.png', 'rb').read(4))\n"
             "print('kept', type(monthly).__name__)\n")


def test_next_request_resumes_the_paused_sandbox(first, daemon, gw, fake):
    sid = ext(first[1])["sandbox_id"]
    wait_state(daemon, sid, "paused")  # between requests
    fake.script = run_then_answer(NEXT_CODE)
    resp = ask(gw, "Is the chart still there?")
    x = ext(resp)
    assert x["sandbox_id"] == sid
    out = output(x["steps"][0])
    assert out["exit_code"] == 0, out
    # the file the first request saved, and the interpreter's memory: resumed, not remade
    assert out["stdout"] == "chart True b'\\x89PNG'\nkept Series\n", out
    wait_state(daemon, sid, "paused")


def test_stream(first, daemon, gw, fake):
    sid = ext(first[1])["sandbox_id"]
    fake.script = run_then_answer("print(len(df))")
    stream = client(gw).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "How many rows?"}], stream=True,
        stream_options={"include_usage": True}, extra_headers={"X-Conversation-Id": CONV})
    chunks = list(stream)
    pieces = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "stdout: 1095\nerror: null", pieces
    assert len(pieces) > 1  # forwarded as the upstream streamed them
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] \
        == ["stop"]
    assert len({c.id for c in chunks}) == 1
    last = chunks[-1]
    assert last.choices == [] and last.usage.total_tokens == 30
    x = ext(last)
    assert x["sandbox_id"] == sid and len(x["steps"]) == 1 and x["stopped"] is None
    assert fake.bodies()[-1]["stream"] is True  # the upstream streamed too
    wait_state(daemon, sid, "paused")


def test_pending_run_python_after_the_callers_own_tool(first, gw, fake):
    """A turn that calls run_python and a tool of the caller's goes back whole, as a plain proxy
    would; the next request runs the run_python call the caller left unanswered."""
    def script(body):
        if last_tool_result(body) is None:
            return ("calls", [("run_python", json.dumps({"code": "print(len(df) * 2)"})),
                              ("get_weather", '{"city": "Oslo"}')])
        return ("text", " | ".join(m["content"] for m in body["messages"] if m["role"] == "tool"))
    fake.script = script
    c = client(gw)
    messages = [{"role": "user", "content": "Rows, and the weather?"}]
    r1 = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER],
                                   extra_headers={"X-Conversation-Id": CONV})
    calls = r1.choices[0].message.tool_calls
    assert r1.choices[0].finish_reason == "tool_calls"
    assert [t.function.name for t in calls] == ["run_python", "get_weather"]
    assert ext(r1)["steps"] == []
    messages += [r1.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": calls[1].id, "content": "sunny"}]
    r2 = c.chat.completions.create(model=MODEL, messages=messages, tools=[WEATHER],
                                   extra_headers={"X-Conversation-Id": CONV})
    [step] = ext(r2)["steps"]
    assert step["tool_call_id"] == calls[0].id and output(step)["stdout"] == "2190\n"
    assert r2.choices[0].message.content.startswith("sunny | {"), r2


def test_another_key_cannot_reach_the_conversation(first, daemon, gw, fake):
    sid_a = ext(first[1])["sandbox_id"]
    probe = ("import os\nprint(os.path.exists('/work/chart.png'), os.path.exists('/work/sales.csv'),"
             " 'monthly' in globals(), os.path.exists('/work/bob.txt'))")
    fake.script = run_then_answer(probe)
    # bob names the same conversation (by the request's user field, this time)
    resp = client(gw, gw.key_b).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "what is there?"}], user=CONV)
    x = ext(resp)
    assert x["conversation_id"] == CONV and x["sandbox_id"] not in (None, sid_a)
    assert output(x["steps"][0])["stdout"] == "False False False False\n", x
    # bob's file under that conversation id goes to bob's sandbox, not alice's
    r = gw.http("PUT", f"/v1/conversations/{CONV}/files?path=/work/bob.txt", body=b"bob",
                key=gw.key_b)
    assert r.status == 201, r
    resp = ask(gw, "and now?")
    assert ext(resp)["sandbox_id"] == sid_a
    assert output(ext(resp)["steps"][0])["stdout"] == "True True True False\n"
    with pytest.raises(openai.AuthenticationError):
        client(gw, "cgw_" + "0" * 64).models.list()


def test_step_cap(daemon, start_gateway):
    with FakeUpstream(loop("print('again')")) as fake:
        g = start_gateway(fake.base_url, "--max-steps", "3")
        resp = ask(g, "loop forever", conv=None)
    assert resp.choices[0].message.content == "Stopped after too many steps."
    assert resp.choices[0].finish_reason == "stop"
    x = ext(resp)
    assert x["stopped"] == "max_steps" and x["conversation_id"] is None
    assert [output(s)["stdout"] for s in x["steps"]] == ["again\n"] * 3
    assert len(fake.requests) == 3
    wait_state(daemon, x["sandbox_id"], "stopped")  # no conversation: the request's own, killed


def test_bad_tool_arguments_are_a_tool_error(start_gateway):
    def script(body):
        result = last_tool_result(body)
        if result is None:
            return ("call", "run_python", "print('not JSON arguments')")
        return ("text", "error: " + result["error"]["name"] + ": " + result["error"]["value"])
    with FakeUpstream(script) as fake:
        g = start_gateway(fake.base_url)
        resp = ask(g, "hi", conv=None)
    assert resp.choices[0].message.content.startswith("error: InvalidArguments: "), resp
    x = ext(resp)
    assert x["sandbox_id"] is None and x["steps"][0]["code"] == ""  # no sandbox was needed


def test_the_callers_tools(start_gateway):
    mine = {"type": "function", "function": {"name": "run_python", "description": "mine",
                                             "parameters": {"type": "object"}}}
    with FakeUpstream(lambda body: ("call", "get_weather", '{"city": "Oslo"}')) as fake:
        g = start_gateway(fake.base_url)
        resp = ask(g, "weather?", conv=None, tools=[WEATHER, mine])
        stream = list(client(g).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "weather?"}], tools=[WEATHER],
            stream=True))
    # a call to the caller's own tool goes back as it came
    assert resp.choices[0].finish_reason == "tool_calls"
    [call] = resp.choices[0].message.tool_calls
    assert (call.function.name, call.function.arguments) == ("get_weather", '{"city": "Oslo"}')
    assert ext(resp)["steps"] == [] and ext(resp)["sandbox_id"] is None
    # the caller's definition of run_python is kept, not doubled
    tools = fake.bodies()[0]["tools"]
    assert [(t["function"]["name"], t["function"].get("description")) for t in tools] == \
        [("get_weather", None), ("run_python", "mine")]
    # streamed: the call comes whole at the end, then finish_reason tool_calls
    deltas = [c.choices[0].delta.tool_calls for c in stream if c.choices and c.choices[0].delta.tool_calls]
    assert len(deltas) == 1 and deltas[0][0].function.name == "get_weather"
    assert stream[-1].choices[0].finish_reason == "tool_calls"


def test_upstream_errors(start_gateway):
    with FakeUpstream(text("never"), status=500) as fake:
        g = start_gateway(fake.base_url)
        with pytest.raises(openai.InternalServerError) as e:
            ask(g, "hi", conv=None)
        assert e.value.status_code == 502 and e.value.code == "upstream_error"
        assert "answered 500: the model fell over" in e.value.message
        with pytest.raises(openai.InternalServerError) as e:  # before the stream started: HTTP
            ask(g, "hi", conv=None, stream=True)
        assert e.value.status_code == 502
    with FakeUpstream(text("late"), delay=3) as fake:
        g = start_gateway(fake.base_url, "--upstream-timeout", "1s")
        start = time.monotonic()
        with pytest.raises(openai.InternalServerError) as e:
            ask(g, "hi", conv=None)
        assert e.value.status_code == 504 and e.value.code == "upstream_timeout"
        assert time.monotonic() - start < 3
    # after the stream started: an error event, then the end
    def script(body):
        return ("calls", [("run_python", "not JSON")], "Let me look.")
    with FakeUpstream(script, status=500, fail_after=1) as fake:
        g = start_gateway(fake.base_url)
        got = []
        with pytest.raises(openai.APIError) as e:
            for chunk in ask(g, "hi", conv=None, stream=True):
                got += [chunk.choices[0].delta.content] if chunk.choices else []
        assert "".join(c or "" for c in got) == "Let me look."
        assert "answered 500" in e.value.message
    # nothing listening upstream
    g = start_gateway(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(openai.InternalServerError) as e:
        client(g).models.list()
    assert e.value.status_code == 502 and "cannot connect to the upstream" in e.value.message


def test_cpuosd_unreachable(start_gateway):
    with FakeUpstream(run_then_answer("print(1)")) as fake:
        g = start_gateway(fake.base_url, cpuos_url=f"http://127.0.0.1:{free_port()}")
        with pytest.raises(openai.InternalServerError) as e:
            ask(g, "hi", conv=None)
    assert e.value.status_code == 503 and e.value.code == "cpuos_unavailable"
    assert "cannot connect to cpuosd" in e.value.message


def test_bad_requests(gw):
    def post(body, key=gw.key_a, headers=None):
        r = gw.http("POST", "/v1/chat/completions", body=body, key=key, headers=headers)
        return r.status, r.json()["error"]
    ok = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    status, err = post(ok, key=None)
    assert (status, err["type"]) == (401, "authentication_error")
    assert post(b"{not json")[0] == 400
    assert post([1])[0] == 400
    for bad, param in [({"messages": ok["messages"]}, "model"), ({"model": MODEL}, "messages"),
                       ({**ok, "n": 2}, "n"), ({**ok, "stream": "yes"}, "stream"),
                       ({**ok, "tools": {}}, "tools"), ({**ok, "messages": [{"content": "x"}]},
                                                         "messages")]:
        status, err = post(bad)
        assert (status, err["type"], err["param"]) == (400, "invalid_request_error", param), err
    status, err = post({**ok, "user": "a\nb"})
    assert status == 400 and err["code"] == "invalid_conversation"
    status, err = post({**ok, "user": "x" * 257})
    assert status == 400 and err["code"] == "invalid_conversation"
    status, err = post(ok, headers={"X-Conversation-Id": "caf\xe9"})  # Latin-1, not UTF-8
    assert status == 400 and err["code"] == "invalid_conversation"
    status, err = post(b"x" * (9 << 20))
    assert (status, err["code"]) == (413, "payload_too_large")
    r = gw.http("GET", "/v1/nope", key=gw.key_a)
    assert r.status == 404 and r.json()["error"]["code"] == "not_found"
    r = gw.http("PUT", f"/v1/conversations/{CONV}/files", body=b"x", key=gw.key_a)
    assert r.status == 400 and r.json()["error"]["code"] == "invalid_path"
    assert [m.id for m in client(gw).models.list()] == ["fake-model"]  # passed through


def test_keys(gw):
    key = gw.create_key("carol")
    assert [m.id for m in client(gw, key).models.list()] == ["fake-model"]
    rows = [line.split("\t") for line in gw.run("keys", "list").stdout.splitlines()]
    assert [r[1] for r in rows] == ["alice", "bob", "carol"]
    carol = rows[2][0]
    assert carol.startswith("gwk_") and key not in gw.run("keys", "list").stdout
    r = gw.run("keys", "delete", carol)
    assert r.returncode == 0, r.stderr
    with pytest.raises(openai.AuthenticationError):
        client(gw, key).models.list()
    assert gw.run("keys", "delete", carol).returncode == 1
    assert gw.run("keys", "create").returncode == 2  # no --name


def test_a_sandbox_gone_is_replaced(first, daemon, gw, fake):
    sid = ext(first[1])["sandbox_id"]
    wait_state(daemon, sid, "paused")
    assert daemon.http("DELETE", f"/v1/sandboxes/{sid}", unix=True).status == 204
    fake.script = run_then_answer("import os\nprint(os.path.exists('/work/sales.csv'))")
    x = ext(ask(gw, "still there?"))
    assert x["sandbox_id"] not in (None, sid)
    assert output(x["steps"][0])["stdout"] == "False\n"  # a new sandbox, empty


def test_deleted_key_takes_its_sandboxes(daemon, gw, fake):
    key = gw.create_key("dave")
    r = gw.http("PUT", "/v1/conversations/d/files?path=/work/x.txt", body=b"x", key=key)
    assert r.status == 201, r
    [sbx] = [s for s in gw.sandboxes() if s["metadata"]["cpuos-gateway-conversation"] == "d"]
    dave = [line.split("\t")[0] for line in gw.run("keys", "list").stdout.splitlines()
            if line.split("\t")[1] == "dave"]
    assert sbx["metadata"]["cpuos-gateway-key"] == dave[0]
    assert gw.run("keys", "delete", dave[0]).returncode == 0
    wait_state(daemon, sbx["id"], "stopped")


def test_example(gw, fake, tmp_path):
    fake.script = seed003
    env = dict(os.environ, GATEWAY_URL=gw.url, GATEWAY_API_KEY=gw.key_a)
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "gateway.py")], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout + r.stderr
    month = grew_most((tmp_path / "sales.csv").read_bytes())
    assert f"grew the most in {month}" in r.stdout, r.stdout
    assert png_size((tmp_path / "figure-1.png").read_bytes())[0] > 0
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "gateway.py")], cwd=tmp_path,
                       env={k: v for k, v in env.items() if k != "GATEWAY_API_KEY"},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "GATEWAY_API_KEY" in r.stderr


def test_a_client_that_leaves_frees_its_conversation(start_gateway):
    with FakeUpstream(text("hello"), delay=1) as fake:
        g = start_gateway(fake.base_url)
        for stream in (True, False):
            body = json.dumps({"model": MODEL, "stream": stream,
                               "messages": [{"role": "user", "content": "hi"}]}).encode()
            with socket.create_connection(("127.0.0.1", g.port)) as s:
                s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Authorization: Bearer " + g.key_a.encode() + b"\r\n"
                          b"X-Conversation-Id: left\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)
                time.sleep(0.2)  # the request is under way, waiting for the model
            start = time.monotonic()
            resp = ask(g, "again", conv="left")  # the conversation is free again
            assert resp.choices[0].message.content == "hello"
            assert time.monotonic() - start < 30
        assert g.proc.poll() is None
