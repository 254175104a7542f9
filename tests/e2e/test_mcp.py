"""cpuos's MCP server through the official MCP SDK's client (PyPI `mcp`, pinned in
tests/e2e/mcp/requirements-*.txt): `cpuos mcp` on stdio and cpuosd's POST /mcp (streamable HTTP),
each listing the tools and running every one (tests/e2e/mcp/client.py); a call on another account's
sandbox is refused. Then raw bad input on /mcp."""
import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from pyvenv import venv_python

HERE = Path(__file__).resolve().parent / "mcp"
CLI_BIN = Path(os.environ.get("CPUOS_CLI_BIN") or ROOT / "build" / "bin" / "cpuos")


@pytest.fixture(scope="module")
def bobs_sandbox(daemon):
    r = daemon.http("POST", "/v1/sandboxes", body={"template": "base", "timeout": "10m"},
                    key=daemon.key_b)
    assert r.status == 201, r
    yield r.json()["id"]
    daemon.http("DELETE", f"/v1/sandboxes/{r.json()['id']}", key=daemon.key_b)


def run_client(py, *args, env=None):
    r = subprocess.run([py, str(HERE / "client.py"), *args], capture_output=True, text=True,
                       timeout=600, env=env)
    calls = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    for row in calls:
        print(f"{row['call']}: {'ok' if row['ok'] else 'FAILED'} {row.get('ms', '')}")
    failed = [f"{row['call']}: {row['error']}\n{row.get('trace', '')}" for row in calls if not row["ok"]]
    assert calls, f"the client ran no call (exit {r.returncode}):\n{r.stderr[-3000:]}"
    assert not failed, "\n".join(failed) + f"\n--- stderr:\n{r.stderr[-2000:]}"
    assert r.returncode == 0, r.stderr[-3000:]


@pytest.mark.parametrize("req", ["mcp-newest", "mcp-1"])
def test_mcp_over_stdio_and_http(daemon, bobs_sandbox, req):
    py = venv_python(HERE / f"requirements-{req}.txt")
    env = {**os.environ, "CPUOS_API_URL": daemon.url, "CPUOS_API_KEY": daemon.key_a,
           "OTHER_SANDBOX": bobs_sandbox}
    run_client(py, "stdio", str(CLI_BIN), env=env)
    run_client(py, "http", f"{daemon.url}/mcp", daemon.key_a, env=env)


def test_mcp_bad_input(daemon):
    url = "/mcp"
    # no key, a wrong one: cpuosd's 401
    assert daemon.http("POST", url, body={"jsonrpc": "2.0", "id": 1, "method": "ping"}).status == 401
    assert daemon.http("POST", url, body={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                       key="cpuos_" + "0" * 64).status == 401
    # not JSON, not an object: cpuosd's 400
    assert daemon.http("POST", url, body=b"{", key=daemon.key_a).status == 400
    assert daemon.http("POST", url, body=b"[]", key=daemon.key_a).status == 400

    def rpc(msg):
        r = daemon.http("POST", url, body=msg, key=daemon.key_a,
                        headers={"Accept": "application/json, text/event-stream"})
        return r

    r = rpc({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert r.status == 200 and r.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}, r
    r = rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert r.status == 202 and not r.body, r
    for msg, code in (({"jsonrpc": "1.0", "id": 1, "method": "ping"}, -32600),
                      ({"jsonrpc": "2.0", "id": [1], "method": "ping"}, -32600),
                      ({"jsonrpc": "2.0", "id": 2, "method": "nope"}, -32601),
                      ({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": []}, -32602),
                      ({"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                        "params": {"name": "run_command", "arguments": "x"}}, -32602),
                      ({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "nope"}},
                       -32602)):
        r = rpc(msg)
        assert r.status == 200 and r.json()["error"]["code"] == code, (msg, r)
    # a tool's own failure is a result with isError, for the model to read
    r = rpc({"jsonrpc": "2.0", "id": 6, "method": "tools/call",
             "params": {"name": "run_command", "arguments": {"sandbox_id": "sbx_0000000000000000",
                                                              "command": "true"}}})
    res = r.json()["result"]
    assert res["isError"] is True and "sandbox" in res["content"][0]["text"], r
    # GET (a server-sent stream) is not offered
    assert daemon.http("GET", url, key=daemon.key_a).status == 405
