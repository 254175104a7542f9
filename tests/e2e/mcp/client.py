"""The official MCP SDK's client (PyPI `mcp`, run under a virtualenv of a pinned version) against
cpuos's MCP server: `client.py stdio CPUOS_BIN` starts `cpuos mcp` as MCP clients do (its
environment carries CPUOS_API_URL and CPUOS_API_KEY); `client.py http URL KEY` speaks streamable
HTTP to cpuosd's /mcp. It lists the tools and runs each; with OTHER_SANDBOX set (a sandbox of another
account's) a call on it must be refused. One JSON line per check, as tests/e2e/e2b/client.py."""
import asyncio
import base64
import json
import os
import sys
import time
import traceback

from mcp import ClientSession

RESULTS = []


def record(name, t0, err=None):
    row = {"call": name, "ok": err is None, "ms": round((time.monotonic() - t0) * 1000)}
    if err is not None:
        row["error"] = f"{type(err).__name__}: {err}"[:600]
        row["trace"] = traceback.format_exc()[-1500:]
    RESULTS.append(row)
    print(json.dumps(row), flush=True)


def need(cond, what):
    if not cond:
        raise AssertionError(what)


def is_error(res):
    """isError (mcp 1.x) or is_error (2.x)."""
    return getattr(res, "is_error", getattr(res, "isError", None))


def mime_of(c):
    return getattr(c, "mime_type", getattr(c, "mimeType", None))


def text_of(res):
    return "".join(c.text for c in res.content if getattr(c, "type", "") == "text")


async def scenario(s):
    async def step(name, coro):
        t0 = time.monotonic()
        try:
            out = await coro
            record(name, t0)
            return out
        except Exception as e:  # every failure is a row
            record(name, t0, e)
            return None

    await step("initialize", s.initialize())

    async def tools():
        names = {t.name for t in (await s.list_tools()).tools}
        want = {"create_sandbox", "list_sandboxes", "pause_sandbox", "resume_sandbox", "kill_sandbox",
                "run_command", "run_code", "read_file", "write_file", "list_files", "get_port_url"}
        need(want <= names, names)
    await step("tools/list", tools())

    async def call(name, **args):
        res = await s.call_tool(name, args)
        return res

    box = {}

    async def create():
        res = await call("create_sandbox", template="python", timeout="10m",
                         metadata={"suite": "mcp"})
        need(not is_error(res), text_of(res))
        box["id"] = json.loads(text_of(res))["sandbox_id"]
        need(box["id"].startswith("sbx_"), box)
    await step("create_sandbox", create())
    sid = box.get("id", "sbx_none")

    async def listed():
        res = await call("list_sandboxes", state="running")
        need(sid in text_of(res), text_of(res))
    await step("list_sandboxes", listed())

    async def command():
        res = await call("run_command", sandbox_id=sid, command="echo hi; python3 -c 'print(\"x\" * 9000)'; exit 3")
        out = json.loads(text_of(res))
        need(out["exit_code"] == 3 and out["stdout"].endswith("x" * 100 + "\n"), out)
        need(len(out["stdout"]) <= 4000, len(out["stdout"]))
    await step("run_command", command())

    async def code():
        res = await call("run_code", sandbox_id=sid,
                         code="import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()\n6 * 7")
        need(not is_error(res), text_of(res))
        need(json.loads(text_of(res))["result"] == "42", text_of(res))
        imgs = [c for c in res.content if getattr(c, "type", "") == "image"]
        need(imgs and base64.b64decode(imgs[0].data)[:4] == b"\x89PNG" and
             mime_of(imgs[0]) == "image/png", res.content)
    await step("run_code", code())

    async def files():
        res = await call("write_file", sandbox_id=sid, path="/work/mcp/note.txt", content="h\u00e9llo")
        need(not is_error(res), text_of(res))
        res = await call("read_file", sandbox_id=sid, path="/work/mcp/note.txt")
        need(text_of(res) == "h\u00e9llo", text_of(res))
        res = await call("list_files", sandbox_id=sid, path="/work/mcp")
        need("note.txt" in text_of(res), text_of(res))
        res = await call("read_file", sandbox_id=sid, path="/work/mcp/none")
        need(is_error(res), text_of(res))
    await step("write_file/read_file/list_files", files())

    async def url():
        res = await call("get_port_url", sandbox_id=sid, port=8000)
        u = json.loads(text_of(res))["url"]
        need(u.startswith("http") and "8000" in u, u)
    await step("get_port_url", url())

    async def pause_resume():
        res = await call("pause_sandbox", sandbox_id=sid)
        need(json.loads(text_of(res))["state"] == "paused", text_of(res))
        res = await call("resume_sandbox", sandbox_id=sid)
        need(json.loads(text_of(res))["state"] == "running", text_of(res))
        res = await call("run_code", sandbox_id=sid, code="6 * 7")
        need(json.loads(text_of(res))["result"] == "42", text_of(res))
    await step("pause_sandbox/resume_sandbox", pause_resume())

    other = os.environ.get("OTHER_SANDBOX")
    if other:
        async def refused():
            for name, args in (("run_command", {"command": "id"}), ("read_file", {"path": "/etc/hostname"}),
                               ("kill_sandbox", {}), ("pause_sandbox", {})):
                res = await call(name, sandbox_id=other, **args)
                need(is_error(res) and "no sandbox" in text_of(res).lower(), (name, text_of(res)))
        await step("another account's sandbox refused", refused())

    async def bad():
        res = await call("run_command", sandbox_id=sid)
        need(is_error(res) and "command" in text_of(res), text_of(res))
        try:
            await s.call_tool("no_such_tool", {})
        except Exception:
            return
        raise AssertionError("an unknown tool was not an error")
    await step("bad arguments", bad())

    async def kill():
        res = await call("kill_sandbox", sandbox_id=sid)
        need(not is_error(res), text_of(res))
        res = await call("run_command", sandbox_id=sid, command="true")
        need(is_error(res), text_of(res))
    await step("kill_sandbox", kill())


async def main():
    mode = sys.argv[1]
    if mode == "stdio":
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client
        params = StdioServerParameters(command=sys.argv[2], args=["mcp"], env=dict(os.environ))
        async with stdio_client(params) as (r, w):
            async with ClientSession(r, w) as s:
                await scenario(s)
    else:
        url, key = sys.argv[2], sys.argv[3]
        headers = {"Authorization": f"Bearer {key}"}
        try:  # mcp 2.x
            from mcp.client.streamable_http import streamable_http_client
            import httpx2
            async with httpx2.AsyncClient(headers=headers, timeout=300) as hc:
                async with streamable_http_client(url, http_client=hc) as streams:
                    async with ClientSession(streams[0], streams[1]) as s:
                        await scenario(s)
        except ImportError:  # mcp 1.x
            from mcp.client.streamable_http import streamablehttp_client
            async with streamablehttp_client(url, headers=headers) as (r, w, _):
                async with ClientSession(r, w) as s:
                    await scenario(s)
    sys.exit(0 if RESULTS and all(r["ok"] for r in RESULTS) else 1)


asyncio.run(main())
