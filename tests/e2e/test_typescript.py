"""The TypeScript SDK (sdk/typescript, @cpuos/sdk) against the session's daemon: node's test
runner runs sdk/typescript/test/ with the daemon's URL and keys in the environment, the way a
user's script finds them (CPUOS_API_URL, CPUOS_API_KEY)."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TS = os.path.join(ROOT, "sdk", "typescript")


def node():
    exe = shutil.which("node")
    if not exe:
        pytest.fail("node is not installed: run scripts/deps.sh", pytrace=False)
    if not os.path.exists(os.path.join(TS, "dist", "index.js")):
        pytest.fail("sdk/typescript/dist is not built: run make", pytrace=False)
    return exe


def test_typescript_sdk_suite(daemon):
    env = dict(os.environ, CPUOS_API_URL=daemon.url, CPUOS_API_KEY=daemon.key_a,
               CPUOS_TEST_KEY_B=daemon.key_b)
    r = subprocess.run([node(), "--test", "--test-reporter=spec", "--test-concurrency=1",
                        "test/sdk.test.mjs"], cwd=TS, env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:])
    assert r.returncode == 0, f"node --test failed ({r.returncode}):\n{r.stdout[-6000:]}\n" \
                              f"{r.stderr[-3000:]}\n{daemon.log_tail(30)}"
    assert re.search(r"\bfail 0\b", r.stdout) and not re.search(r"\bpass 0\b", r.stdout), \
        r.stdout[-3000:]
