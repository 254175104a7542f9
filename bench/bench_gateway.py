#!/usr/bin/env python3
"""cpuos-gateway: what it adds to a request over calling the upstream directly.

A scripted OpenAI-compatible upstream (tests/e2e/fake_upstream.py) answers text at once, with no
tool call, so no sandbox is involved: the difference is the gateway's own work (HTTP in, the key's
hash looked up, the body checked and rebuilt with the tool added, HTTP out and back, the answer
rebuilt). Each round sends one request straight to the upstream and one through the gateway, on
kept-alive connections, so both see the same noise; whole answers and streamed ones (read to the
end). Prints p50 and p90 of each side and the difference; asserts nothing.
Run on a built tree: python3 bench/bench_gateway.py [N]."""

import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from fake_upstream import FakeUpstream, text  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
GATEWAY = os.environ.get("CPUOS_GATEWAY_BIN", os.path.join(ROOT, "build", "bin", "cpuos-gateway"))
BODY = {"model": "qwen3-32b", "messages": [
    {"role": "system", "content": "You are a data analyst. Use run_python to compute every number."},
    {"role": "user", "content": "Which month grew the most?"}]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(conn, path, body, key=None):
    """Milliseconds from sending a request to having read all of its answer."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode()
    start = time.perf_counter()
    conn.request("POST", path, body=data, headers=headers)
    resp = conn.getresponse()
    payload = resp.read()
    ms = (time.perf_counter() - start) * 1000
    if resp.status != 200:
        sys.exit(f"bench_gateway: {path} answered {resp.status}: {payload[:300]!r}")
    return ms


def quantiles(xs):
    q = statistics.quantiles(xs, n=10)
    return statistics.median(xs), q[8]


def main():
    if not os.path.exists(GATEWAY):
        sys.exit(f"bench_gateway: {GATEWAY} does not exist: build it first (make all)")
    state = tempfile.mkdtemp(prefix="cpuos-bench-gateway-")
    proc = None
    try:
        with FakeUpstream(text("March grew the most.")) as fake:
            key = subprocess.run([GATEWAY, "keys", "create", "--name", "bench", "--state-dir", state],
                                 capture_output=True, text=True, check=True).stdout.strip()
            port = free_port()
            proc = subprocess.Popen(
                [GATEWAY, "--listen", f"127.0.0.1:{port}", "--upstream-url", fake.base_url,
                 "--cpuos-url", f"http://127.0.0.1:{free_port()}", "--state-dir", state,
                 "--log-level", "warn"], env={**os.environ, "UPSTREAM_API_KEY": "bench"})
            for _ in range(100):
                try:
                    http.client.HTTPConnection("127.0.0.1", port, timeout=1).request("GET", "/health")
                    break
                except OSError:
                    time.sleep(0.05)
            upstream_port = int(fake.base_url.split(":")[2].split("/")[0])
            direct = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=30)
            via = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            print(f"gateway overhead, {N} requests each way, a text answer (no sandbox):")
            for mode, body in (("whole", BODY), ("stream", {**BODY, "stream": True})):
                for _ in range(min(50, N)):  # warm both connections and the pools
                    timed(direct, "/v1/chat/completions", body)
                    timed(via, "/v1/chat/completions", body, key)
                d, g = [], []
                for _ in range(N):
                    d.append(timed(direct, "/v1/chat/completions", body))
                    g.append(timed(via, "/v1/chat/completions", body, key))
                (d50, d90), (g50, g90) = quantiles(d), quantiles(g)
                print(f"  {mode:6}  direct p50 {d50:6.2f} ms  p90 {d90:6.2f} ms   "
                      f"gateway p50 {g50:6.2f} ms  p90 {g90:6.2f} ms   "
                      f"overhead p50 {g50 - d50:+6.2f} ms  p90 {g90 - d90:+6.2f} ms")
    finally:
        if proc:
            proc.terminate()
            proc.wait(30)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
