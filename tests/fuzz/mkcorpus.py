#!/usr/bin/env python3
"""Writes the seed corpus of a fuzz target: mkcorpus.py TARGET OUTDIR (TARGET: see TARGETS).

proto: well-formed frames of each kind and a few broken ones.
agentc: what an agent sends back to the operations fuzz_agentc starts (ids 1..14,
        see its comment), well-formed and hostile.
http: raw requests for every route of api_routes (src/daemon/api/api.c), with bad
      query strings, bad JSON, bad durations, huge numbers and NUL escapes; the
      first byte is fuzz_http's flags (1: API key, 2: Unix socket).
priv: the privileged helper's requests, each kind well-formed and the ones it must
      refuse (a shell for QEMU, /etc as a run directory, ..); the first byte is the
      descriptors that came with it.
e2b: what cpuos-e2b reads from its clients: multipart bodies (the SDKs' uploads, broken ones), Connect
      envelopes (one, several, short, oversized), access tokens (forged, cut), multipart
      Content-Types; the first byte picks which (fuzz_e2b.c).
gateway: an upstream's streamed and whole answers (text, tool calls in pieces, errors, broken
      events) and cpuosd's execution objects (figures, errors, hostile images); the first
      byte is how many bytes fuzz_gateway feeds the event parser at a time, less one.
dns: guests' queries (A, AAAA, other classes, names of any case, DNS over HTTPS endpoints,
      a label with a dot, compression loops, answers, updates, EDNS); the first byte picks
      fuzz_dns's policy (0 allow-all, 1 deny-all, 2 api.example.com and *.pypi.org, 3 "*").
proxy_sni: TLS ClientHellos (1.2 and 1.3 shapes, in one record or several, with an SNI
      of any case, none, an empty or overlong one, a NUL in it) and what is not one; the
      first byte is the name buffer's size less one.
netd: cpuosd's requests to cpuos-netd (src/daemon/net/netd_msg.h), each kind well-formed and
      the ones it must refuse (the configuration again, an answer, a slot past the range, a
      body of 0 or too many bytes, the wrong descriptors); the first byte is the descriptors.
ramdiff: files of a pause's written pages (src/runner/ramdiff.h) for fuzz_ramdiff's VM of two blocks,
      whole and lying (runs out of order, past their block, of no page, sizes that do not add
      up, blocks it lacks or has twice), and `info ramblock` text; the first byte is how many
      pages of data fuzz_ramdiff appends (0-7).
proxy_head: HTTP/1 request heads to hosts with and without secrets, with placeholders (also
      in Basic credentials), what the rules match, and what http1.h refuses (two Hosts, a
      port with more after it, both framings, folded lines, h2c); the first byte is
      fuzz_proxy_head's flags (1 TLS, 2 swap, 4 secrets and rules).
"""
import base64
import json
import os
import struct
import sys

# Frame types and attribute tags (src/common/proto.h).
P_HELLO, P_PING, P_EXEC, P_ATTACH, P_WAIT, P_SIGNAL, P_PS = 1, 2, 3, 4, 5, 6, 7
P_FWRITE, P_FREAD, P_STAT, P_LIST, P_MKDIR, P_CANCEL = 8, 9, 10, 11, 12, 18
P_CODE = 20
P_DATA, P_CREDIT = 32, 33
P_OK, P_ERROR, P_STARTED, P_STDOUT, P_STDERR, P_EXIT, P_ENTRY, P_NOTICE, P_EVENT = 64, 65, 66, 67, 68, 69, 70, 71, 72
A_VERSION, A_AGENT, A_ARG, A_ENV, A_TIMEOUT_MS = 1, 2, 3, 5, 8
A_PROC, A_PID, A_PATH, A_MODE, A_ERRNO, A_MESSAGE = 11, 12, 14, 16, 21, 22
A_EXIT_CODE, A_SIGNAL, A_TIMED_OUT, A_SIZE, A_MTIME_NS, A_UID, A_GID = 23, 24, 25, 26, 27, 28, 29
A_LINK, A_STATE, A_CMD, A_NOTICE, A_TARGET, A_CREDIT = 30, 31, 32, 33, 35, 40
A_LANGUAGE, A_RESTARTED, A_DIED = 45, 48, 49
P_FSEVENT = 73
A_PTY, A_FSOP, A_ISDIR = 53, 54, 55
PF_EOF = 1


def attr(tag, value):
    return struct.pack("<HI", tag, len(value)) + value


def u32(tag, v):
    return attr(tag, struct.pack("<I", v & 0xFFFFFFFF))


def u64(tag, v):
    return attr(tag, struct.pack("<Q", v & 0xFFFFFFFFFFFFFFFF))


def s(tag, v):
    return attr(tag, v if isinstance(v, bytes) else v.encode())


def frame(type_, payload, flags=0, op=1):
    return struct.pack("<IHHI", len(payload), type_, flags, op) + payload


def proto_seeds():
    return {
        "hello": frame(1, attr(1, struct.pack("<I", 1))),
        "exec": frame(3, attr(3, b"python3") + attr(3, b"-c") + attr(5, b"A=b") + attr(8, struct.pack("<Q", 120000))),
        "stat": frame(10, attr(14, b"/work/a.csv")),
        "data_eof": frame(32, b"\x00\xffbinary", flags=1),
        "exit": frame(69, attr(23, struct.pack("<I", 3))),
        "two_frames": frame(2, b"") + frame(10, attr(14, b"/x")),
        "nul_in_path": frame(10, attr(14, b"/a\x00b")),
        "attr_overrun": frame(10, struct.pack("<HI", 14, 1000) + b"/x"),
        "truncated": frame(3, attr(3, b"ls"))[:-1],
        "reserved_flag": frame(2, b"", flags=2),
        "oversized": struct.pack("<IHHI", 1 << 30, 3, 0, 1),
    }


def agentc_seeds():
    # The operations fuzz_agentc starts, by id.
    PLAIN, SPAWN, CANCELS, ABORTS = 1, 2, 3, 4
    COLLECT, QUEUE, NDJSON, STAT, LIST, PS = 5, 6, 7, 8, 9, 10
    SETTIME, ABANDONED, CANCEL1 = 11, 12, 13
    CODE, CODE_STREAM = 14, 15
    WATCH = 16
    CANCEL2 = 17  # the P_CANCEL of the reader that leaves halfway
    SPAWNED = 18  # the first operation a callback starts

    def started(op, proc=1, pid=100):
        return frame(P_STARTED, u32(A_PROC, proc) + u32(A_PID, pid), op=op)

    def exit_(op, code=0, sig=None, timed_out=0):
        p = u32(A_EXIT_CODE, code) if sig is None else u32(A_SIGNAL, sig)
        return frame(P_EXIT, p + u32(A_TIMED_OUT, timed_out), op=op)

    def ok(op, payload=b""):
        return frame(P_OK, payload, op=op)

    def err(op, errno_, msg=b"no such file"):
        return frame(P_ERROR, u32(A_ERRNO, errno_) + s(A_MESSAGE, msg), op=op)

    def entry(op, path, mode, link=None):
        p = s(A_PATH, path) + u32(A_MODE, mode) + u64(A_SIZE, 12) + u64(A_MTIME_NS, 1700000000 * 10**9)
        p += u32(A_UID, 0) + u32(A_GID, 0)
        if link:
            p += s(A_LINK, link)
        return frame(P_ENTRY, p, op=op)

    def ps_entry(op, proc, state, cmd):
        return frame(P_ENTRY, u32(A_PROC, proc) + u32(A_PID, 200 + proc) + u32(A_STATE, state) + s(A_CMD, cmd)
                     + (u32(A_EXIT_CODE, 1) if state == 2 else b""), op=op)

    exec_flow = started(PLAIN) + frame(P_STDOUT, b"hello\n", op=PLAIN) + frame(P_STDERR, b"warn\n", op=PLAIN) + exit_(PLAIN)
    spawn_flow = started(SPAWN) + exit_(SPAWN) + started(SPAWNED) + exit_(SPAWNED, 3)
    cancel_flow = frame(P_ENTRY, s(A_PATH, "/x"), op=CANCELS) + err(PLAIN, 125, b"cancelled") + ok(CANCELS) + ok(19)
    abort_flow = entry(ABORTS, "a", 0o100644) + ok(ABORTS)
    collect = started(COLLECT, 2, 101) + frame(P_STDOUT, b"x" * 200, op=COLLECT) + frame(P_STDERR, b"\xff\xfe", op=COLLECT) + exit_(COLLECT, 1)
    queue = frame(P_DATA, b"file content", op=QUEUE) + frame(P_DATA, b"", flags=PF_EOF, op=QUEUE) + ok(QUEUE, u64(A_SIZE, 12))
    ndjson = (started(NDJSON, 3, 102) + frame(P_STDOUT, "caf\u00e9 ".encode()[:-2], op=NDJSON)
              + frame(P_STDOUT, "\u00e9!\n".encode()[1:], op=NDJSON) + frame(P_STDERR, b"\xc3", op=NDJSON) + exit_(NDJSON, sig=9))
    stat = ok(STAT, u32(A_MODE, 0o120777) + u64(A_SIZE, 4) + u64(A_MTIME_NS, 2**64 - 1) + u32(A_UID, 1000) + u32(A_GID, 1000) + s(A_LINK, "/etc"))
    listing = entry(LIST, "a.csv", 0o100644) + entry(LIST, "dir", 0o040755) + entry(LIST, "ln", 0o120777, "a.csv") + ok(LIST)
    ps = ps_entry(PS, 1, 1, "python3 -c 'print(1)'") + ps_entry(PS, 2, 2, b"\xff\xfebad utf8") + ok(PS)
    tail = ok(SETTIME) + err(ABANDONED, 125, b"cancelled") + ok(CANCEL1) + ok(CANCEL2)
    notice = frame(P_NOTICE, u32(A_NOTICE, 1), op=0)

    def event(op, *lines):
        return frame(P_EVENT, b"".join(l + b"\n" for l in lines), op=op)

    png = base64.b64encode(b"\x89PNG\r\n\x1a\n fake").decode()
    code_flow = (frame(P_STARTED, u32(A_PROC, 4) + u32(A_PID, 104) + s(A_LANGUAGE, "python"), op=CODE)
                 + frame(P_STDOUT, b"hi\n", op=CODE)
                 + event(CODE, json.dumps({"type": "result", "is_main_result": True, "text": "42", "html": "<b>42</b>"}).encode(),
                         json.dumps({"type": "result", "png": png, "json": {"a": [1]}}).encode())
                 + frame(P_EVENT, json.dumps({"type": "error", "name": "E", "value": "v", "traceback": "t"}).encode()[:20], op=CODE)
                 + frame(P_EVENT, json.dumps({"type": "error", "name": "E", "value": "v", "traceback": "t"}).encode()[20:] + b"\n", op=CODE)
                 + event(CODE, b'{"type": "end", "execution_count": 3}')
                 + frame(P_OK, u32(A_TIMED_OUT, 1), op=CODE))
    code_stream = (frame(P_STARTED, u32(A_PROC, 5) + u32(A_PID, 105) + u32(A_RESTARTED, 1) + s(A_MESSAGE, "the kernel had been killed by signal 9"), op=CODE_STREAM)
                   + event(CODE_STREAM, b"not json", b'{"type": "result", "png": "!!"}', b'[1]', b'{"type": "result", "text": 5}',
                           json.dumps({"type": "result", "text": "caf\u00e9 " * 300}).encode())
                   + frame(P_STDERR, b"\xff", op=CODE_STREAM)
                   + frame(P_OK, u32(A_DIED, 1) + s(A_MESSAGE, b"the kernel was killed by signal 9\xff"), op=CODE_STREAM))
    def fsevent(op, kind, path, isdir=False):
        return frame(P_FSEVENT, u32(A_FSOP, kind) + s(A_PATH, path) + (u32(A_ISDIR, 1) if isdir else b""), op=op)

    watch = (frame(P_STARTED, b"", op=WATCH) + fsevent(WATCH, 1, "/work/x/a.txt") + fsevent(WATCH, 1, "/work/x/sub", True)
             + fsevent(WATCH, 6, "/work/x") + fsevent(WATCH, 2, b"/work/x/\xff\xfe") + ok(WATCH))
    watch_bad = (frame(P_STARTED, b"", op=WATCH) + fsevent(WATCH, 9, "/work/x") + fsevent(WATCH, 1, "relative")
                 + frame(P_FSEVENT, s(A_PATH, "/no/op"), op=WATCH))
    # A terminal's output on the stream (raw bytes), from an attach that says A_PTY.
    pty = (frame(P_STARTED, u32(A_PROC, 3) + u32(A_PID, 102) + u32(A_PTY, 1), op=NDJSON)
           + frame(P_STDOUT, b"\x1b[1m\xff\xfe\r\n", op=NDJSON) + exit_(NDJSON, 7))
    everything = (exec_flow + spawn_flow + cancel_flow + abort_flow + collect + queue + ndjson + stat + listing + ps + notice
                  + code_flow + code_stream + watch + tail)

    return {
        "exec": exec_flow,
        "spawn": spawn_flow,
        "cancel": cancel_flow,
        "abort": abort_flow,
        "collect": collect,
        "queue": queue,
        "ndjson": ndjson,
        "code": code_flow,
        "code_stream": code_stream,
        "watch": watch,
        "watch_bad": watch_bad,
        "pty": pty,
        "code_long_line": frame(P_STARTED, b"", op=CODE) + b"".join(frame(P_EVENT, b"x" * 60000, op=CODE) for _ in range(3))
        + event(CODE, b'{"type": "result", "text": "after"}') + frame(P_OK, b"", op=CODE),
        "stat": stat,
        "list": listing,
        "ps": ps,
        "notice": notice,
        "everything": everything,
        "everything_eof": everything + b"\x00",  # odd length: the agent closes, one byte of a header pending
        "errors": err(PLAIN, 2) + err(COLLECT, 28, b"\xffbad") + frame(P_ERROR, b"", op=STAT) + frame(P_ERROR, u32(A_ERRNO, 0xFFFFFFFF), op=LIST),
        "malformed_terminal": frame(P_OK, struct.pack("<HI", A_SIZE, 99) + b"\x01", op=STAT) + frame(P_EXIT, b"\x01\x02", op=COLLECT),
        "unknown_ids": ok(999) + frame(P_STDOUT, b"late", op=77) + exit_(0xFFFFFFFF) + ok(0),
        "double_terminal": ok(PLAIN) + ok(PLAIN) + exit_(PLAIN) + frame(P_STDOUT, b"after", op=PLAIN),
        "host_types": frame(P_EXEC, s(A_ARG, "sh"), op=PLAIN) + frame(P_HELLO, u32(A_VERSION, 2), op=SPAWN)
        + frame(P_CREDIT, u32(A_CREDIT, 65536), op=COLLECT) + frame(P_CANCEL, u32(A_TARGET, 1), op=0),
        "reserved_flag": frame(P_STDOUT, b"x", flags=2, op=PLAIN),
        "oversized": struct.pack("<IHHI", 1 << 30, P_STDOUT, 0, COLLECT),
        "truncated": exec_flow[:-3],
        "big_output": started(COLLECT, 2, 101) + b"".join(frame(P_STDOUT, bytes([65 + i % 26]) * 1000, op=COLLECT) for i in range(4)) + exit_(COLLECT),
        "many_entries": b"".join(entry(LIST, f"f{i}", 0o100644) for i in range(60)) + ok(LIST),
        "too_many_frames": b"".join(frame(P_ENTRY, s(A_PATH, "x"), op=STAT) for _ in range(20)) + ok(STAT),
        "kill_on_start": started(ABANDONED, 9, 109) + frame(P_STDOUT, b"late", op=ABANDONED) + exit_(ABANDONED, sig=9),
        "ndjson_long": started(NDJSON) + frame(P_STDOUT, b"y" * 1500 + "\u20ac".encode(), op=NDJSON)
        + frame(P_STDOUT, b"z" * 700, op=NDJSON) + frame(P_STDERR, b"e" * 900, op=NDJSON) + exit_(NDJSON, 0),
        "credit": frame(P_CREDIT, u32(A_CREDIT, 0xFFFFFFFF), op=NDJSON) + frame(P_CREDIT, b"", op=NDJSON) + exit_(NDJSON),
        "nul_strings": entry(LIST, b"a\x00b", 0o100644) + ps_entry(PS, 1, 1, b"x\x00y") + err(QUEUE, 5, b"a\x00b"),
    }


def http_seeds():
    sid = "sbx_0123456789abcdef"
    key, sock, both = 1, 2, 3

    def req(method, path, body=None, headers=(), ctype="application/json", raw_body=None):
        h = [f"{method} {path} HTTP/1.1", "Host: localhost"]
        h += list(headers)
        b = b""
        if body is not None:
            b = json.dumps(body).encode()
        if raw_body is not None:
            b = raw_body
        if body is not None or raw_body is not None:
            if ctype:
                h.append(f"Content-Type: {ctype}")
            h.append(f"Content-Length: {len(b)}")
        return ("\r\n".join(h) + "\r\n\r\n").encode() + b

    seeds = {
        # the open routes and the admin ones
        "health": (0, req("GET", "/v1/health")),
        "openapi": (0, req("GET", "/v1/openapi.json")),
        "templates": (key, req("GET", "/v1/templates")),
        "templates_nokey": (0, req("GET", "/v1/templates")),
        "templates_badkey": (0, req("GET", "/v1/templates", headers=["Authorization: Bearer cpuos_nope"])),
        "templates_emptykey": (0, req("GET", "/v1/templates", headers=["Authorization: Bearer "])),
        # builds the node runs (with images_off the fuzzer's daemon refuses them: 501)
        "build_post": (key, req("POST", "/v1/templates/web/build?follow=true&build_arg=A%3D1&build_arg=B%00x",
                                raw_body=b"\x1f\x8b\x08\x00" + b"\x00" * 16, ctype="application/gzip")),
        "build_admin": (sock, req("POST", "/v1/templates/web/build", raw_body=b"x", ctype="application/x-tar")),
        "build_get": (key, req("GET", "/v1/templates/web/build")),
        # MCP (the fuzzer's daemon has no listener of its own to call: 501)
        "mcp_call": (key, req("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                               "params": {"name": "run_command",
                                                          "arguments": {"sandbox_id": "sbx_0", "command": "id"}}})),
        "mcp_admin": (sock, req("POST", "/mcp", {"jsonrpc": "2.0", "method": "notifications/initialized"})),
        "build_logs": (key, req("GET", "/v1/templates/web/build/logs?offset=99999999999999999999&follow=1")),
        "build_cancel": (key, req("DELETE", "/v1/templates/web/build")),
        "keys_create": (sock, req("POST", "/v1/keys", {"name": "k1"})),
        "keys_create_tcp": (key, req("POST", "/v1/keys", {"name": "k1"})),
        "keys_create_badname": (sock, req("POST", "/v1/keys", {"name": 7})),
        "keys_create_longname": (sock, req("POST", "/v1/keys", {"name": "n" * 300, "account": "a" * 300})),
        "keys_list": (sock, req("GET", "/v1/keys")),
        "keys_delete": (sock, req("DELETE", "/v1/keys/key_0000000000000000")),
        "keys_delete_odd": (sock, req("DELETE", "/v1/keys/%00%2e%2e")),
        # sandboxes
        "create": (key, req("POST", "/v1/sandboxes", {"template": "python", "timeout": "5m", "vcpus": 1, "memory_mb": 512,
                                                      "metadata": {"a": "b"}, "env": {"X": "1"}})),
        "create_admin": (sock, req("POST", "/v1/sandboxes", {"template": "base"})),
        "create_empty": (key, req("POST", "/v1/sandboxes", raw_body=b"")),
        "create_badjson": (key, req("POST", "/v1/sandboxes", raw_body=b'{"template": "python",')),
        "create_notobject": (key, req("POST", "/v1/sandboxes", raw_body=b'["python"]')),
        "create_deep": (key, req("POST", "/v1/sandboxes", raw_body=b"[" * 2000 + b"]" * 2000)),
        "create_baddur": (key, req("POST", "/v1/sandboxes", {"template": "python", "timeout": "5 fortnights"})),
        "create_negdur": (key, req("POST", "/v1/sandboxes", {"template": "python", "timeout": -5})),
        "create_hugedur": (key, req("POST", "/v1/sandboxes", {"template": "python", "timeout": "99999999999999999999h"})),
        "create_hugenum": (key, req("POST", "/v1/sandboxes", raw_body=b'{"template":"python","vcpus":1e999,"memory_mb":99999999999999999999999,"disk_mb":-9223372036854775808}')),
        "create_nul": (key, req("POST", "/v1/sandboxes", raw_body=b'{"template":"py\\u0000thon","metadata":{"k\\u0000":"v\\u0000"}}')),
        "create_badutf8": (key, req("POST", "/v1/sandboxes", raw_body=b'{"template":"\xff\xfe"}')),
        "create_badtemplate": (key, req("POST", "/v1/sandboxes", {"template": "../../etc/passwd"})),
        "create_types": (key, req("POST", "/v1/sandboxes", {"template": ["x"], "timeout": {"s": 1}, "metadata": [1], "env": {"A": 1}})),
        "create_manymeta": (key, req("POST", "/v1/sandboxes", {"template": "base", "metadata": {f"k{i}": "v" for i in range(100)}})),
        "create_toobig": (key, req("POST", "/v1/sandboxes", headers=["Content-Length: 99999999999"], ctype=None)),
        "create_chunked": (key, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{\"a\":\r\n2\r\n1}\r\n0\r\n\r\n"),
        "create_formct": (key, req("POST", "/v1/sandboxes", raw_body=b"template=python", ctype="application/x-www-form-urlencoded")),
        "list": (key, req("GET", "/v1/sandboxes?state=running&limit=10")),
        "list_admin": (sock, req("GET", "/v1/sandboxes?limit=100")),
        "list_badlimit": (key, req("GET", "/v1/sandboxes?limit=abc")),
        "list_hugelimit": (key, req("GET", "/v1/sandboxes?limit=99999999999999999999999")),
        "list_neglimit": (key, req("GET", "/v1/sandboxes?limit=-1&state=bogus")),
        "list_badcursor": (key, req("GET", "/v1/sandboxes?cursor=%ff%fe%00")),
        "list_cursor": (key, req("GET", "/v1/sandboxes?cursor=MTcwMDAwMDAwMDpzYnhfMA")),
        "list_meta": (key, req("GET", "/v1/sandboxes?metadata.a=b&metadata.c=%00&metadata.=x")),
        "list_dupes": (key, req("GET", "/v1/sandboxes?limit=1&limit=2&state&state=")),
        "get": (key, req("GET", f"/v1/sandboxes/{sid}")),
        "get_longid": (key, req("GET", "/v1/sandboxes/" + "a" * 200)),
        "get_nul": (key, req("GET", "/v1/sandboxes/sbx_%00")),
        "kill": (key, req("DELETE", f"/v1/sandboxes/{sid}")),
        "timeout": (key, req("POST", f"/v1/sandboxes/{sid}/timeout", {"timeout": "10m"})),
        "timeout_bad": (key, req("POST", f"/v1/sandboxes/{sid}/timeout", {"timeout": "0s"})),
        "exec": (key, req("POST", f"/v1/sandboxes/{sid}/exec", {"argv": ["python3", "-c", "print(1)"], "timeout": "30s",
                                                                 "env": {"A": "1"}, "cwd": "/work", "background": False})),
        "exec_shell": (key, req("POST", f"/v1/sandboxes/{sid}/exec", {"cmd": "echo hi", "stdin": "data\n", "user": "root"})),
        "exec_bad": (key, req("POST", f"/v1/sandboxes/{sid}/exec", {"argv": [], "cmd": "x", "timeout": 1e300, "stdin": 5, "env": {"": "x"}})),
        "code": (key, req("POST", f"/v1/sandboxes/{sid}/code", {"code": "df.head()", "context": "default", "language": "python",
                                                                 "timeout": "2m", "stream": True, "figure_formats": ["png", "svg"]})),
        "code_bad": (key, req("POST", f"/v1/sandboxes/{sid}/code", {"code": "a\u0000b", "context": "../x", "language": "cobol",
                                                                     "figure_formats": ["gif", 1], "timeout": 0})),
        "code_ctx_create": (key, req("POST", f"/v1/sandboxes/{sid}/code/contexts", {"id": "ctx.a-1", "cwd": "/work", "user": "root"})),
        "code_ctx_list": (key, req("GET", f"/v1/sandboxes/{sid}/code/contexts")),
        "code_ctx_restart": (key, req("POST", f"/v1/sandboxes/{sid}/code/contexts/{'c' * 70}/restart")),
        "code_ctx_delete": (key, req("DELETE", f"/v1/sandboxes/{sid}/code/contexts/%2e%2e")),
        "procs": (key, req("GET", f"/v1/sandboxes/{sid}/processes")),
        "proc_get": (key, req("GET", f"/v1/sandboxes/{sid}/processes/1")),
        "proc_get_badpid": (key, req("GET", f"/v1/sandboxes/{sid}/processes/99999999999999999999")),
        "proc_kill": (key, req("DELETE", f"/v1/sandboxes/{sid}/processes/-1")),
        "proc_stream": (key, req("GET", f"/v1/sandboxes/{sid}/processes/1/stream")),
        "proc_stdin": (key, req("POST", f"/v1/sandboxes/{sid}/processes/1/stdin?eof=true", raw_body=b"input\n", ctype="application/octet-stream")),
        "proc_wait_bad": (key, req("POST", f"/v1/sandboxes/{sid}/processes/1/wait?timeout=%00")),
        "proc_signal": (key, req("POST", f"/v1/sandboxes/{sid}/processes/1/signal", {"signal": "SIGTERM"})),
        "proc_signal_bad": (key, req("POST", f"/v1/sandboxes/{sid}/processes/1/signal", {"signal": 99999})),
        "proc_wait": (key, req("POST", f"/v1/sandboxes/{sid}/processes/1/wait?timeout=1s")),
        "file_put": (key, req("PUT", f"/v1/sandboxes/{sid}/files?path=/work/a.txt&mode=0644", raw_body=b"hello", ctype="application/octet-stream")),
        "file_put_badpath": (key, req("PUT", f"/v1/sandboxes/{sid}/files?path=../etc/passwd", raw_body=b"x", ctype=None)),
        "file_put_huge": (key, req("PUT", f"/v1/sandboxes/{sid}/files?path=/a", headers=["Content-Length: 18446744073709551615"], ctype=None)),
        "file_get": (key, req("GET", f"/v1/sandboxes/{sid}/files?path=/work/a.txt")),
        "file_get_nul": (key, req("GET", f"/v1/sandboxes/{sid}/files?path=/work/a%00b")),
        "file_get_nopath": (key, req("GET", f"/v1/sandboxes/{sid}/files")),
        "file_delete": (key, req("DELETE", f"/v1/sandboxes/{sid}/files?path=/work/a&recursive=true")),
        "file_stat": (key, req("GET", f"/v1/sandboxes/{sid}/files/stat?path=/work/../..")),
        "file_list": (key, req("GET", f"/v1/sandboxes/{sid}/files/list?path=/work&depth=99999999999")),
        "file_mkdir": (key, req("POST", f"/v1/sandboxes/{sid}/files/mkdir", {"path": "/work/d", "parents": True, "mode": "0755"})),
        "file_rename": (key, req("POST", f"/v1/sandboxes/{sid}/files/rename", {"from": "/a", "to": "/b\u0000c"})),
        "file_long_path": (key, req("GET", f"/v1/sandboxes/{sid}/files/stat?path=/" + "a" * 5000)),
        # routing and HTTP itself
        "unknown_route": (key, req("GET", "/v1/nope")),
        "wrong_method": (key, req("PATCH", "/v1/sandboxes")),
        "head": (key, req("HEAD", "/v1/health")),
        "options": (0, req("OPTIONS", "*")),
        "trailing_slash": (key, req("GET", "/v1/sandboxes/")),
        "double_slash": (key, req("GET", "/v1//sandboxes")),
        "pct_path": (key, req("GET", "/v1/sandboxes/%2e%2e/keys")),
        "http10": (key, b"GET /v1/health HTTP/1.0\r\n\r\n"),
        "pipelined": (key, req("GET", "/v1/health") + req("GET", "/v1/templates") + req("POST", "/v1/sandboxes", {"template": "x"})),
        "expect_continue": (key, req("POST", "/v1/sandboxes", {"template": "x"}, headers=["Expect: 100-continue"])),
        # libmicrohttpd 0.9.75 spun without answering on these (http.c refuses them now)
        "expect_nobody": (0, b"GET /v1/health HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n\r\nX"),
        "expect_cl0": (key, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 0\r\n\r\n{}"),
        "garbage": (0, b"\x00\x01\x02 / HTTP/1.1\r\n\r\n"),
        "no_version": (0, b"GET /v1/health\r\n\r\n"),
        "bad_header": (key, b"GET /v1/health HTTP/1.1\r\nHost x\r\n: y\r\n\r\n"),
        "long_header": (key, req("GET", "/v1/health", headers=["X-Long: " + "y" * 3000])),
        "dup_cl": (key, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 5\r\n\r\n{}"),
        "neg_cl": (key, b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}"),
        "two_auth": (both, req("GET", "/v1/sandboxes", headers=["Authorization: Basic Zm9vOmJhcg=="])),
    }
    return {name: bytes([flags]) + data for name, (flags, data) in seeds.items()}


# The privileged helper's requests and tags (src/priv/priv_msg.h).
PR = dict(NS_CREATE=1, NS_POLICY=2, NS_DESTROY=3, NS_OPEN=4, NS_SOCKET=5, NS_RESOLVED=6,
          NS_COUNTERS=7, SPAWN=8, REAP=9, KILL=10, HOLD=11, RELEASE=12, PAGEMAP=13, MEM=14)
T = dict(SLOT=1, MARK=2, MODE=3, ALLOW=4, DENY=5, KIND=6, ADD=7, ADDRS=8, NAME=9, VCPUS=10,
         MEMORY=11, KVM=12, RUN_DIR=13, BINARY=14, RO=15, RW=16, TAP=17, ARG=18, PID=19, UID=20,
         SIGNO=21, RAM_RO=42)


def priv_seeds():
    def req(t, *attrs, fds=0):
        return bytes([fds]) + frame(PR[t], b"".join(attrs))

    def cidr(fam, prefix, addr):
        return bytes([fam, prefix]) + addr.ljust(16, b"\x00")

    def spawn(*extra, run=b"/s/vms/sbx_1", argv0=b"qemu-system-x86_64"):
        return req("SPAWN", s(T["NAME"], "sbx_1-0a0b0c0d"), u32(T["VCPUS"], 2), u32(T["MEMORY"], 512),
                   s(T["RUN_DIR"], run), s(T["RO"], "/g/bzImage"), s(T["RO"], "/c/layers/x.img"),
                   s(T["ARG"], argv0), s(T["ARG"], "-machine"), s(T["ARG"], "microvm"), *extra, fds=1)

    slot = u32(T["SLOT"], 3)
    return {
        "create": req("NS_CREATE", slot, u32(T["MARK"], 7), u32(T["MODE"], 2),
                      attr(T["ALLOW"], cidr(4, 8, b"\x0a")), attr(T["DENY"], cidr(6, 16, b"\x20\x01"))),
        "policy_allow_all": req("NS_POLICY", slot, u32(T["MARK"], 8), u32(T["MODE"], 0)),
        "destroy": req("NS_DESTROY", slot),
        "open": req("NS_OPEN", slot),
        "socket_dns": req("NS_SOCKET", slot, u32(T["KIND"], 1), fds=1),
        "socket_nofd": req("NS_SOCKET", slot, u32(T["KIND"], 3)),
        "resolved": req("NS_RESOLVED", slot, u32(T["ADD"], 1),
                        attr(T["ADDRS"], b"\x01\x02\x03\x04" + struct.pack("<I", 300)), fds=1),
        "counters": req("NS_COUNTERS", slot),
        "spawn": spawn(),
        "spawn_net": spawn(slot, s(T["TAP"], "tap0"), s(T["RW"], "/s/snapshots/fork-1/mem")),
        "spawn_fork_dir": spawn(run=b"/s/snapshots/fork-ab"),
        "spawn_sh": spawn(argv0=b"/bin/sh"),
        "spawn_etc": spawn(run=b"/etc"),
        "spawn_dotdot": spawn(run=b"/s/vms/../../etc"),
        "spawn_rw_shadow": spawn(s(T["RW"], "/etc/shadow")),
        "spawn_binary": spawn(s(T["BINARY"], "/tmp/qemu")),
        "spawn_tap_nons": spawn(s(T["TAP"], "tap0")),
        "reap": req("REAP", u32(T["PID"], 4242)),
        "kill": req("KILL", u32(T["PID"], 4242), u32(T["SIGNO"], 9)),
        "kill_stop": req("KILL", u32(T["PID"], 4242), u32(T["SIGNO"], 19)),
        "kill_init": req("KILL", u32(T["PID"], 1), u32(T["SIGNO"], 9)),
        "hold": req("HOLD", u32(T["PID"], 4242)),
        "release": req("RELEASE", u32(T["UID"], 1001), s(T["NAME"], "sbx_1-0a0b0c0d")),
        "release_root": req("RELEASE", u32(T["UID"], 0), s(T["NAME"], "x")),
        "pagemap": req("PAGEMAP", u32(T["PID"], 4242), u32(T["UID"], 1003)),
        "mem": req("MEM", u32(T["PID"], 4242), u32(T["UID"], 1003)),
        "mem_root": req("MEM", u32(T["PID"], 4242), u32(T["UID"], 0)),
        "mem_no_uid": req("MEM", u32(T["PID"], 4242)),
        "spawn_ram_base": spawn(s(T["RAM_RO"], "/s/vms/sbx_1/base")),
        "spawn_ram_other": spawn(s(T["RAM_RO"], "/s/vms/sbx_2/base")),
        "unknown_type": bytes([0]) + frame(40, b""),
        "reply_type": bytes([0]) + frame(64, b""),
        "twice": req("NS_OPEN", slot, slot),
        "foreign_tag": req("NS_OPEN", slot, u32(T["PID"], 5)),
        "slot_past": req("NS_OPEN", u32(T["SLOT"], 64)),
        "short_u32": req("NS_OPEN", attr(T["SLOT"], b"\x01\x00")),
        "truncated": req("NS_OPEN", slot)[:-1],
        "trailing": req("NS_OPEN", slot) + b"\x00",
        "empty": bytes([0]),  # once read as a frame of whatever the stack held
    }


def ramdiff_seeds():
    # fuzz_ramdiff's VM: "mem" of 16 pages and "pc.bios" of 2 (src/runner/ramdiff.h's format).
    def block(name, length, runs):
        return (name.encode().ljust(64, b"\x00") + struct.pack("<QQ", length, len(runs)) +
                b"".join(struct.pack("<QQ", a, n) for a, n in runs))

    def diff(blocks, pages, magic=b"CPUOSRD1", page=4096):
        # the pages' data: fuzz_ramdiff appends as many as the first byte says
        head = magic + struct.pack("<II", len(blocks), page)
        return bytes([pages]) + head + b"".join(blocks)

    mem, bios = 16 * 4096, 2 * 4096
    whole_bios = block("pc.bios", bios, [(0, 2)])
    return {
        "ok": diff([block("mem", mem, [(3, 1), (10, 3)]), whole_bios], 6),
        "ok_reversed": diff([whole_bios, block("mem", mem, [(15, 1)])], 3),
        "no_runs": diff([block("mem", mem, []), whole_bios], 2),
        "overlap": diff([block("mem", mem, [(3, 2), (4, 1)]), whole_bios], 5),
        "past_end": diff([block("mem", mem, [(15, 2)]), whole_bios], 4),
        "zero_run": diff([block("mem", mem, [(3, 0)]), whole_bios], 2),
        "huge_run": diff([block("mem", mem, [(1, 2**63)]), whole_bios], 2),
        "other_length": diff([block("mem", mem + 4096, [(0, 1)]), whole_bios], 3),
        "unknown_block": diff([block("rom", mem, [(0, 1)]), whole_bios], 3),
        "twice": diff([whole_bios, whole_bios], 4),
        "short": diff([block("mem", mem, [(3, 1)]), whole_bios], 2),
        "long": diff([block("mem", mem, [(3, 1)]), whole_bios], 4),
        "bad_magic": diff([block("mem", mem, [(3, 1)]), whole_bios], 3, magic=b"CPUOSRD0"),
        "bad_page": diff([block("mem", mem, [(3, 1)]), whole_bios], 3, page=2 << 20),
        "many_runs": diff([block("mem", mem, [(i, 1) for i in range(0, 10, 2)]), whole_bios], 7),
        "blocks_text": b"        Block Name    PSize  Offset  Used  Total  HVA  RO\n"
                       b"               mem    4 KiB  0x0 0x10000 0x10000 0x7f0000000000  rw\n"
                       b"           pc.bios    4 KiB  0x10000 0x2000 0x2000 0x7f0000100000  rw\n",
        "empty": b"",
    }


def netd_seeds():
    ND = {"CONFIG": 1, "ATTACH": 2, "POLICY": 3, "CUT": 4, "SECRETS": 5, "DETACH": 6, "OK": 64}
    NT_SLOT, NT_BODY, NT_NSLOTS = 1, 2, 3

    def req(t, *attrs, fds=0):
        return bytes([fds]) + frame(ND[t], b"".join(attrs))

    slot, body = u32(NT_SLOT, 5), u32(NT_BODY, 200)
    return {
        "attach": req("ATTACH", slot, body, fds=4),
        "policy": req("POLICY", slot, body, fds=1),
        "cut": req("CUT", slot),
        "secrets": req("SECRETS", slot, u32(NT_BODY, 4 << 20), fds=1),
        "detach": req("DETACH", slot),
        "attach_3fds": req("ATTACH", slot, body, fds=3),
        "config_again": req("CONFIG", u32(NT_NSLOTS, 8)),
        "answer": req("OK"),
        "slot_past": req("DETACH", u32(NT_SLOT, 64)),
        "body_empty": req("POLICY", slot, u32(NT_BODY, 0), fds=1),
        "body_huge": req("SECRETS", slot, u32(NT_BODY, (4 << 20) + 1), fds=1),
        "body_on_cut": req("CUT", slot, body),
        "slot_twice": req("CUT", slot, slot),
        "slot_string": req("CUT", s(NT_SLOT, "5")),
        "truncated": req("CUT", slot)[:-1],
        "unknown_type": bytes([0]) + frame(40, b""),
    }


def e2b_seeds():
    import struct

    def env(msg, flags=0):
        b = json.dumps(msg).encode() if not isinstance(msg, bytes) else msg
        return struct.pack(">BI", flags, len(b)) + b

    part = (b'--b\r\nContent-Disposition: form-data; name="file"; filename="/home/user/a.txt"\r\n'
            b"Content-Type: text/plain\r\n\r\nhello\r\n")
    return {
        "mp_one": b"\0" + part + b"--b--\r\n",
        "mp_two": b"\0" + part + part.replace(b"a.txt", b"b.bin") + b"--b--",
        "mp_field": b'\0--b\r\nContent-Disposition: form-data; name="x"\r\n\r\nv\r\n--b--',
        "mp_unclosed": b"\0" + part,
        "mp_no_blank": b"\0--b\r\nContent-Disposition: form-data\r\n--b--",
        "mp_quote": b'\0--b\r\nContent-Disposition: form-data; filename="/a\r\n\r\nx\r\n--b--',
        "env_start": b"\1" + env({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo hi"]}}),
        "env_stream": b"\1" + env({"start": {"process": {"pid": 7}}}) + env({"data": {"input": {"stdin": "aGkK"}}}) + env({}, 2),
        "env_short": b"\1\0\0\0\0\x09{}",
        "env_huge": b"\1\0\xff\xff\xff\xff{}",
        "tok_forged": b"\2e2bt_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "tok_cut": b"\2e2bt_",
        "tok_bad_alphabet": b"\2e2bt_!!!!****",
        "ct_quoted": b'\3multipart/form-data; boundary="a b"',
        "ct_plain": b"\3multipart/form-data; boundary=0123456789abcdef",
        "ct_none": b"\3multipart/form-data; charset=utf-8",
    }


def gateway_seeds():
    def events(*objs, done=True, sep="\n\n"):
        text = "".join(f"data: {json.dumps(o) if not isinstance(o, str) else o}{sep}" for o in objs)
        return (text + (f"data: [DONE]{sep}" if done else "")).encode()

    def chunk(delta, finish=None):
        return {"id": "c", "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    def call(i, name=None, args="", cid=None):
        fn = {"arguments": args} if name is None else {"name": name, "arguments": args}
        return {"index": i, **({"id": cid} if cid else {}), "function": fn}

    code = json.dumps({"code": "print(6 * 7)"})
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
    seeds = {
        "stream_text": events(chunk({"role": "assistant", "content": ""}), chunk({"content": "Hel"}),
                              chunk({"content": "lo"}), chunk({}, "stop"),
                              {"choices": [], "usage": {"prompt_tokens": 3, "total_tokens": 5}}),
        "stream_calls": events(chunk({"tool_calls": [call(0, "run_python", "", "a")]}),
                               chunk({"tool_calls": [call(1, "f", "{}", "b")]}),
                               *[chunk({"tool_calls": [call(0, args=code[i:i + 5])]})
                                 for i in range(0, len(code), 5)], chunk({}, "tool_calls")),
        "stream_no_index": events(chunk({"tool_calls": [{"id": "x", "function": {"name": "run_python",
                                                                                 "arguments": code}}]}),
                                  chunk({"tool_calls": [{"id": "y", "function": {"name": "g"}}]})),
        "stream_crlf_comments": events(": ping", chunk({"content": "a"}), sep="\r\n\r\n"),
        "stream_error": events({"error": {"message": "boom"}}),
        "stream_cut": events(chunk({"content": "a"}), done=False)[:-3],
        "stream_bad": events("{not json", chunk({"tool_calls": [call(99, "f")]}),
                             chunk({"tool_calls": [{"index": -1}]}), chunk({"tool_calls": "x"})),
        "completion": json.dumps({"choices": [{"message": {"role": "assistant", "content": None,
                                                           "tool_calls": [{"function": {
                                                               "name": "run_python", "arguments": code}}]},
                                               "finish_reason": "tool_calls"}]}).encode(),
        "completion_bad": json.dumps({"choices": [{"message": {"tool_calls": [{"function": {}}]}}]}).encode(),
        "execution": json.dumps({"stdout": "x" * 5000, "stderr": "é" * 3000, "error": {
            "name": "ValueError", "value": "bad", "traceback": "T" * 3000}, "timed_out": True,
            "results": [{"text": "<Figure>", "png": png}, {"is_main_result": True, "text": "42"},
                        {"text": "evil", "png": "not base64!"}, {"jpeg": png}, 7]}).encode(),
        "execution_odd": json.dumps({"stdout": 5, "error": "x", "results": {"png": 1}}).encode(),
    }
    return {name: bytes([i % 16]) + data for i, (name, data) in enumerate(seeds.items())}


def dns_seeds():
    ALLOW_ALL, DENY_ALL, HOSTS, STAR = 0, 1, 2, 3
    A, NS, TXT, AAAA, OPT, ANY = 1, 2, 16, 28, 41, 255
    IN, CH = 1, 3

    def name(n):
        if isinstance(n, bytes):
            return n
        return b"".join(bytes([len(label)]) + label.encode() for label in n.split(".") if label) + b"\0"

    def query(qname, qtype=A, qclass=IN, flags=0x0100, qd=1, extra=b"", ar=0, id_=0x1234):
        return struct.pack(">HHHHHH", id_, flags, qd, 0, 0, ar) + name(qname) + struct.pack(">HH", qtype, qclass) + extra

    opt = b"\0" + struct.pack(">HHIH", OPT, 1232, 0, 0)
    seeds = {
        "a_api": (HOSTS, query("api.example.com")),
        "a_pypi": (HOSTS, query("files.pypi.org")),
        "a_pypi_bare": (HOSTS, query("pypi.org")),
        "a_other": (HOSTS, query("evil.example.net")),
        "aaaa": (HOSTS, query("api.example.com", AAAA)),
        "any": (ALLOW_ALL, query("example.com", ANY)),
        "chaos": (ALLOW_ALL, query("version.bind", TXT, CH)),
        "upper_dot": (HOSTS, query("API.Example.COM")),
        "doh_star": (STAR, query("cloudflare-dns.com")),
        "doh_named": (STAR, query("dns.google")),
        "deny_all": (DENY_ALL, query("api.example.com")),
        "label_dot": (HOSTS, query(b"\x06x.pypi\x03org\0")),
        "label_nul": (HOSTS, query(b"\x04a\0bc\x04pypi\x03org\0")),
        "root": (ALLOW_ALL, query(b"\0", NS)),
        "edns": (HOSTS, query("api.example.com", extra=opt, ar=1)),
        "answer": (ALLOW_ALL, query("example.com", flags=0x8180)),
        "update": (ALLOW_ALL, query("example.com", flags=0x2800)),
        "two_questions": (ALLOW_ALL, query("a.com", qd=2) + name("b.com") + struct.pack(">HH", A, IN)),
        "no_question": (ALLOW_ALL, struct.pack(">HHHHHH", 1, 0x0100, 0, 0, 0, 0)),
        "loop": (ALLOW_ALL, struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c" + struct.pack(">HH", A, IN)),
        "long_name": (ALLOW_ALL, query(".".join(["a" * 63] * 3 + ["b" * 61]))),
        "truncated": (HOSTS, query("api.example.com")[:20]),
        "header_only": (ALLOW_ALL, struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0)),
    }
    return {k: bytes([p]) + q for k, (p, q) in seeds.items()}


def proxy_sni_seeds():
    def ext(t, body):
        return struct.pack(">HH", t, len(body)) + body

    def sni(host):
        entry = b"\0" + struct.pack(">H", len(host)) + host
        return ext(0, struct.pack(">H", len(entry)) + entry)

    groups = ext(10, struct.pack(">HHH", 4, 0x001d, 0x0017))
    sigalgs = ext(13, struct.pack(">HHHH", 6, 0x0403, 0x0804, 0x0401))
    versions13 = ext(43, bytes([4]) + struct.pack(">HH", 0x0304, 0x0303))
    key_share = ext(51, struct.pack(">HHH", 36, 0x001d, 32) + bytes(range(32)))
    alpn = ext(16, struct.pack(">H", 12) + b"\x02h2\x08http/1.1")

    def hello(exts, suites=(0xc02f, 0xc030, 0x009c), legacy=0x0303):
        body = struct.pack(">H", legacy) + bytes(range(32)) + b"\x20" + bytes(32)
        body += struct.pack(">H", 2 * len(suites)) + b"".join(struct.pack(">H", c) for c in suites)
        body += b"\x01\x00" + struct.pack(">H", len(exts)) + exts
        return b"\x01" + struct.pack(">I", len(body))[1:] + body

    def record(hs, version=0x0301):
        return b"\x16" + struct.pack(">HH", version, len(hs)) + hs

    h12 = hello(sni(b"api.example.com") + groups + sigalgs + alpn)
    h13 = hello(sni(b"api.example.com") + groups + sigalgs + versions13 + key_share + alpn,
                suites=(0x1301, 0x1302, 0x1303, 0xc02f))
    seeds = {
        "tls12": record(h12),
        "tls13": record(h13),
        "upper_dot": record(hello(sni(b"API.Example.COM.") + groups + sigalgs)),
        "no_sni": record(hello(groups + sigalgs + versions13 + key_share, suites=(0x1301,))),
        "empty_sni": record(hello(sni(b"") + groups + sigalgs)),
        "dot_sni": record(hello(sni(b".") + groups + sigalgs)),
        "nul_sni": record(hello(sni(b"a\0b.example.com") + groups + sigalgs)),
        "long_sni": record(hello(sni(b"a" * 300) + groups + sigalgs)),
        "two_names": record(hello(ext(0, struct.pack(">H", 10) + b"\0\0\x03a.b\0\0\x02cd") + sigalgs)),
        "two_records": record(h13[:50]) + record(h13[50:]),
        "record_only": record(h13)[:5],
        "half": record(h13)[: len(record(h13)) // 2],
        "sslv3": record(hello(sni(b"old.example.com"), legacy=0x0300), version=0x0300),
        "http": b"GET / HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
        "alert": b"\x15\x03\x03\x00\x02\x02\x28",
    }
    out = {k: b"\xff" + v for k, v in seeds.items()}
    out["small_buffer"] = b"\x07" + record(h12)
    return out


def proxy_head_seeds():
    TLS, SWAP, SECRETS = 1, 2, 4
    ph_a = "cpuos-secret-0123456789abcdef0123456789abcdef"
    ph_b = "cpuos-secret-ffffffffffffffffffffffffffffffff"
    basic = base64.b64encode(("user:" + ph_a).encode()).decode()

    def head(host, *hdrs, line="GET / HTTP/1.1", body=""):
        return (line + "\r\n" + ("Host: " + host + "\r\n" if host is not None else "")
                + "".join(h + "\r\n" for h in hdrs) + "\r\n" + body).encode()

    seeds = {
        "plain": (0, head("api.example.com", "Accept: */*")),
        "bearer_tls": (TLS | SWAP | SECRETS, head("api.example.com", "Authorization: Bearer " + ph_a)),
        "bearer_plain": (SWAP | SECRETS, head("api.example.com", "Authorization: Bearer " + ph_a)),
        "bearer_noswap": (TLS | SECRETS, head("api.example.com", "Authorization: Bearer " + ph_a)),
        "basic": (TLS | SWAP | SECRETS, head("api.example.com", "Authorization: Basic " + basic)),
        "cookie_b": (SWAP | SECRETS, head("a.example.org", "Cookie: s=" + ph_b, "X-Note: " + ph_b)),
        "wrong_host": (TLS | SWAP | SECRETS, head("evil.example.net", "Authorization: " + ph_a + ph_b)),
        "rule": (TLS | SWAP | SECRETS, head("api.example.com", "x-a: aab", "Authorization: mine",
                                              "Content-Length: 5", line="POST /v1/chat HTTP/1.1", body="hello")),
        "rule_query": (TLS | SWAP | SECRETS, head("a.example.org", line="GET /p?z=1&k=2 HTTP/1.1")),
        "connection": (SECRETS, head("api.example.com", "Connection: keep-alive, Upgrade",
                                     "HTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA", "Expect: 100-continue")),
        "websocket": (0, head("ws.example.com:8080", "Upgrade: websocket", "Connection: Upgrade",
                              "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==")),
        "h2c": (0, head("api.example.com", "Upgrade: h2c")),
        "two_hosts": (0, head("a.example.com", "Host: b.example.com")),
        "host_port_junk": (0, head("api.example.com:80/x")),
        "host_dot": (0, head(".")),
        "host_upper_dot": (0, head("API.Example.COM.:443")),
        "no_host": (0, head(None, "Accept: */*")),
        "both_framings": (0, head("a.com", "Content-Length: 3", "Transfer-Encoding: chunked")),
        "chunked": (SWAP | SECRETS, head("a.example.org", "Transfer-Encoding: chunked",
                                         line="POST / HTTP/1.1", body="3\r\nabc\r\n0\r\n\r\n")),
        "folded": (0, head("a.com", "X-A: b", " folded")),
        "space_colon": (0, head("a.com", "X-A : b")),
        "bare_lf": (0, b"GET / HTTP/1.1\nHost: a.com\n\n"),
        "http10": (0, head("a.com", line="GET / HTTP/1.0")),
        "absolute": (0, head("a.com", line="GET http://a.com/ HTTP/1.1")),
        "long_host": (0, head("a" * 300)),
        "big_length": (0, head("a.com", "Content-Length: 999999999999999", line="PUT /x HTTP/1.1")),
        "incomplete": (0, head("api.example.com")[:-2]),
    }
    return {k: bytes([f]) + v for k, (f, v) in seeds.items()}


def image_seeds():
    """fuzz_image: byte 0 picks a layer (0) or an archive (1), then its tar."""
    import io
    import json
    import tarfile

    def tar(*entries, fmt=tarfile.GNU_FORMAT):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
            for name, kind, extra in entries:
                info = tarfile.TarInfo(name)
                info.type = kind
                data = None
                if kind == tarfile.REGTYPE:
                    data = extra or b""
                    info.size = len(data)
                elif kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
                    info.linkname = extra
                info.mode, info.uid, info.gid = 0o4755 if name.endswith("su") else 0o644, 0, 0
                t.addfile(info, io.BytesIO(data) if data is not None else None)
        return buf.getvalue()

    R, D, L, H = tarfile.REGTYPE, tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
    layer = tar(("etc", D, None), ("etc/marker", R, b"hi\n"), ("usr/bin/su", R, b"x"),
                ("etc/l", L, "/usr/share/x"), ("etc/h", H, "etc/marker"))
    import hashlib
    cfg = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Env": ["A=1"]},
                      "rootfs": {"diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]}}).encode()
    saved = tar(("c.json", R, cfg), ("l/layer.tar", R, layer), ("m/layer.tar", L, "../l/layer.tar"),
                ("manifest.json", R, json.dumps([{"Config": "c.json", "Layers": ["m/layer.tar"]}]).encode()))
    return {
        "layer": b"\0" + layer,
        "layer_pax": b"\0" + tar(("a/b", R, b"x" * 600), fmt=tarfile.PAX_FORMAT),
        "whiteouts": b"\0" + tar(("a/.wh.b", R, None), ("c/.wh..wh..opq", R, None)),
        "through_link": b"\0" + tar(("l", L, "/tmp"), ("l/x", R, b"x")),
        "dotdot": b"\0" + tar(("../x", R, b"x"), ("a/../../y", R, None)),
        "hardlink_out": b"\0" + tar(("h", H, "../../etc/passwd")),
        "device": b"\0" + tar(("dev/null", tarfile.CHRTYPE, None)),
        "docker_save": b"\1" + saved,
        "archive_out": b"\1" + tar(("../index.json", R, b"{}")),
    }


TARGETS = {"image": image_seeds, "proto": proto_seeds, "agentc": agentc_seeds, "http": http_seeds, "priv": priv_seeds,
           "gateway": gateway_seeds, "e2b": e2b_seeds, "dns": dns_seeds, "proxy_sni": proxy_sni_seeds,
           "proxy_head": proxy_head_seeds, "netd": netd_seeds, "ramdiff": ramdiff_seeds}

if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in TARGETS:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(TARGETS)} OUTDIR")
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, data in TARGETS[sys.argv[1]]().items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
