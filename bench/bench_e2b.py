#!/usr/bin/env python3
"""cpuos-e2b: what E2B's SDK through cpuos-e2b costs beside the cpuos SDK straight to cpuosd, in one
run on one daemon.

Each round, interleaved so both see the same noise: `commands.run("true")` through cpuos-e2b
(E2B's SDK runs it as `/bin/bash -l -c true`, a background exec whose output is relayed as a
Connect stream) beside `sbx.exec(["/bin/bash", "-l", "-c", "true"])` of the cpuos SDK (the same
work in the guest) and beside `sbx.exec("true")`; then `files.write` of 10 MB each way (E2B's SDK
sends str and bytes as multipart, which cpuos-e2b reads whole before it streams it on). Prints
p50 of each and the ratio to the direct path; asserts nothing. The E2B SDK runs in the newest
pinned virtualenv of tests/e2e (made on first use from PyPI).
Run as root on a built tree: python3 bench/bench_e2b.py [N]."""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from bench_net import Daemon  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
E2B = os.environ.get("CPUOS_E2B_BIN", os.path.join(ROOT, "build", "bin", "cpuos-e2b"))

# Runs under the E2B SDK's virtualenv: both SDKs in one process, timed alike.
INNER = r'''
import json, os, statistics, sys, time
sys.path.insert(0, os.path.join(os.environ["ROOT"], "sdk", "python"))
import cpuos
from e2b import Sandbox
n = int(os.environ["N"])
direct = cpuos.Sandbox.create(template="base", timeout="30m", api_key=os.environ["KEY"],
                              api_url=os.environ["CPUOS_URL"])
via = Sandbox.create(template="base", timeout=1800)
blob = os.urandom(10 << 20)
t = {"e2b run": [], "direct bash -l": [], "direct sh": [], "e2b write": [], "direct write": []}
def timed(name, fn):
    t0 = time.perf_counter(); fn(); t[name].append((time.perf_counter() - t0) * 1000)
for i in range(n + 3):
    timed("e2b run", lambda: via.commands.run("true"))
    timed("direct bash -l", lambda: direct.exec(["/bin/bash", "-l", "-c", "true"]))
    timed("direct sh", lambda: direct.exec("true"))
    if i % 3 == 0:
        timed("e2b write", lambda: via.files.write("/tmp/blob", blob))
        timed("direct write", lambda: direct.files.write("/tmp/blob", blob))
    if i == 2:  # the first rounds warm connections and the guest's caches
        t = {k: [] for k in t}
direct.kill(); via.kill()
print(json.dumps({k: statistics.median(v) for k, v in t.items()}))
'''


def main():
    from pyvenv import venv_python
    py = venv_python(__import__("pathlib").Path(ROOT) / "tests/e2e/e2b/requirements-py-newest.txt")
    d = Daemon()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    state = tempfile.mkdtemp(prefix="cpuos-bench-e2b-")
    proc = subprocess.Popen([E2B, "--listen", f"127.0.0.1:{port}", "--cpuos-url", d.url,
                             "--state-dir", state, "--log-level", "warn"])
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        env = {**os.environ, "ROOT": ROOT, "N": str(N), "KEY": d.key, "CPUOS_URL": d.url,
               "E2B_API_URL": url, "E2B_SANDBOX_URL": url, "E2B_API_KEY": d.key}
        out = subprocess.run([py, "-c", INNER], env=env, capture_output=True, text=True, timeout=3600)
        if out.returncode != 0:
            sys.exit(f"bench_e2b: the run failed:\n{out.stderr[-3000:]}")
        m = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"cpuos-e2b beside the cpuos SDK, base template, p50 of {N} (writes: of {N // 3 + 1}):")
        print(f"  commands.run('true')   {m['e2b run']:8.1f} ms   direct exec bash -l -c true "
              f"{m['direct bash -l']:8.1f} ms   ratio {m['e2b run'] / m['direct bash -l']:.2f}x"
              f"   (direct exec('true') {m['direct sh']:.1f} ms: {m['e2b run'] / m['direct sh']:.2f}x)")
        print(f"  files.write 10 MB      {m['e2b write']:8.1f} ms   direct files.write "
              f"{m['direct write']:8.1f} ms   ratio {m['e2b write'] / m['direct write']:.2f}x")
    finally:
        proc.terminate()
        proc.wait(30)
        d.stop()
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
