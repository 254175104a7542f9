"""The code interpreter over the HTTP API (docs/api.md, "Code"), on a real cpuosd with real microVMs:
state between calls, results (text, HTML, PNG, SVG), errors, timeouts, dead kernels, contexts,
streaming, pause and fork, and a kernel whose lines are hostile. The SDKs' run_code is tested in
test_code_sdk.py."""

import base64
import http.client
import json
import threading
import time

import pytest

from fake_openai import png_size


@pytest.fixture(scope="module")
def sbx(daemon):
    """One python sandbox of alice's for the module (raw API: its id)."""
    r = daemon.http("POST", "/v1/sandboxes", body={"template": "python", "timeout": "30m"},
                    key=daemon.key_a, timeout=600)
    assert r.status == 201, r
    sid = r.json()["id"]
    yield sid
    daemon.http("DELETE", f"/v1/sandboxes/{sid}", key=daemon.key_a)


def run(daemon, sid, code, key=None, expect=200, **body):
    r = daemon.http("POST", f"/v1/sandboxes/{sid}/code", body={"code": code, **body},
                    key=key or daemon.key_a, timeout=300)
    assert r.status == expect, r
    return r.json()


def main_text(x):
    mains = [res for res in x["results"] if res["is_main_result"]]
    assert len(mains) == 1, x
    return mains[0]["text"]


def test_state_persists_between_calls(daemon, sbx):
    x = run(daemon, sbx, "counter = 41\nimport os\nos.chdir('/tmp')\nprint('set')")
    assert x["stdout"] == "set\n" and x["error"] is None and x["results"] == []
    assert x["context"] == "default" and x["language"] == "python"
    x = run(daemon, sbx, "counter += 1\ncounter")
    assert main_text(x) == "42"
    assert main_text(run(daemon, sbx, "import os; os.getcwd()")) == "'/tmp'"
    # A notebook's rules: a last line ending in ';' shows nothing; `_` is the last value shown.
    assert run(daemon, sbx, "counter;")["results"] == []
    assert main_text(run(daemon, sbx, "_ * 2")) == "'/tmp/tmp'"
    main_text(run(daemon, sbx, "counter"))
    assert main_text(run(daemon, sbx, "_ * 2")) == "84"
    run(daemon, sbx, "import os; os.chdir('/work')")


def restored_python(daemon, make_sandbox):
    """A python sandbox restored from the template snapshot, which a new daemon builds first:
    a create that boots asks for it, and the test then waits for that build to end in the log
    instead of booting sandbox after sandbox beside it (once, on 2 cores under ASan, this took
    583 of its 600 s), and says how the last build ended if none came."""
    deadline = time.monotonic() + 600
    done = "template python snapshot "  # its end: "(...): warmed and saved", or "not built"

    def builds():
        with open(daemon.log_path) as f:
            return f.read().count(done)

    while True:
        seen = builds()
        s = make_sandbox(template="python")
        with open(daemon.log_path) as f:
            started = [line for line in f if f"sandbox {s.id} started" in line]
        if started and ("restored" in started[-1] or "warm pool" in started[-1]):
            return s
        s.kill()
        while builds() == seen and time.monotonic() < deadline:
            time.sleep(0.5)
        with open(daemon.log_path) as f:
            last = [line for line in f if done in line][-1:]
        assert time.monotonic() < deadline, f"no python template snapshot in 10 minutes: {last}"


def test_first_call_of_a_new_sandbox_has_the_imports(daemon, make_sandbox):
    # The python template's snapshot holds the default context with them already imported.
    s = restored_python(daemon, make_sandbox)
    x = run(daemon, s.id, "import sys; sorted(m for m in ('numpy', 'pandas', 'matplotlib.pyplot') if m in sys.modules)")
    assert main_text(x) == "['matplotlib.pyplot', 'numpy', 'pandas']"


def test_dataframe_comes_as_html_and_text(daemon, sbx):
    x = run(daemon, sbx, "import pandas as pd\ndf = pd.DataFrame({'month': ['2025-06', '2025-07'], "
                         "'revenue': [10.5, 30.25]})\ndf")
    main = [r for r in x["results"] if r["is_main_result"]][0]
    assert "<table" in main["html"] and "2025-07" in main["html"]
    assert "revenue" in main["text"] and "30.25" in main["text"]


def test_figures_come_as_png_and_svg(daemon, sbx):
    code = ("import matplotlib.pyplot as plt\n"
            "plt.figure(figsize=(4, 3)); plt.plot([1, 3, 2]); plt.show()\n"
            "display('between')\n"
            "fig, ax = plt.subplots(); ax.bar(['a', 'b'], [1, 2])\n"
            "print('drawn')")
    x = run(daemon, sbx, code)
    assert x["error"] is None and x["stdout"] == "drawn\n", x
    texts = [r["text"] for r in x["results"]]
    # plt.show() gives the first figure at once; display() comes next; the open one at the end.
    assert texts == ["<Figure size 400x300 with 1 Axes>", "'between'", "<Figure size 640x480 with 1 Axes>"], texts
    for r in (x["results"][0], x["results"][2]):
        w, h = png_size(base64.b64decode(r["png"], validate=True))
        assert w > 100 and h > 100
    # Each figure is closed once given: the next call has none left over.
    assert run(daemon, sbx, "import matplotlib.pyplot as plt; plt.get_fignums()")["results"][0]["text"] == "[]"
    x = run(daemon, sbx, "plt.plot([0, 1]);", figure_formats=["png", "svg"])
    [fig] = x["results"]
    assert "<svg" in fig["svg"] and png_size(base64.b64decode(fig["png"]))[0] > 100


def test_a_saved_figure_is_given_as_the_image_it_saved(daemon, sbx):
    def saved():
        return daemon.http("GET", f"/v1/sandboxes/{sbx}/files?path=/work/saved.png", key=daemon.key_a).body

    x = run(daemon, sbx, "import matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.savefig('/work/saved.png', dpi=60)")
    [fig] = x["results"]
    assert base64.b64decode(fig["png"]) == saved() and png_size(saved())[0] < 640 * 60 / 100 + 1
    # Changed after it was saved: drawn anew, as it is now.
    x = run(daemon, sbx, "plt.plot([1, 2])\nplt.savefig('/work/saved.png')\nplt.title('later');")
    png = base64.b64decode(x["results"][0]["png"])
    assert png_size(png) == png_size(saved()) and png != saved()


def test_an_error_has_name_value_traceback_and_the_next_call_works(daemon, sbx):
    x = run(daemon, sbx, "def f(d):\n    return 1 / d\nvalue = 7\nf(0)")
    e = x["error"]
    assert e["name"] == "ZeroDivisionError" and e["value"] == "division by zero"
    assert "<cell" in e["traceback"] and "return 1 / d" in e["traceback"]
    assert "kernel.py" not in e["traceback"]
    assert main_text(run(daemon, sbx, "value")) == "7"
    e = run(daemon, sbx, "x = (")["error"]
    assert e["name"] == "SyntaxError"
    e = run(daemon, sbx, "import sys; sys.exit(3)")["error"]
    assert e["name"] == "SystemExit" and e["value"] == "3"
    assert main_text(run(daemon, sbx, "value + 1")) == "8"


def test_notebook_lines_run_in_a_shell(daemon, sbx):
    x = run(daemon, sbx, "%matplotlib inline\n!echo from $0 as $(id -un)\n_exit_code")
    assert x["stdout"] == "from /bin/sh as user\n" and main_text(x) == "0", x


def test_a_timeout_interrupts_and_the_context_survives(daemon, sbx):
    run(daemon, sbx, "kept = 'still here'")
    t0 = time.monotonic()
    x = run(daemon, sbx, "while True:\n    pass", timeout="2s")
    assert x["timed_out"] is True and x["error"]["name"] == "KeyboardInterrupt", x
    assert time.monotonic() - t0 < 30
    assert main_text(run(daemon, sbx, "kept")) == "'still here'"


def test_a_kernel_killed_from_a_shell_is_restarted(daemon, sbx):
    run(daemon, sbx, "doomed = 1", context="victim")
    r = daemon.http("POST", f"/v1/sandboxes/{sbx}/exec", key=daemon.key_a,
                    body={"cmd": "pkill -KILL -f 'kernel[.]py victim'"})
    assert r.status == 200 and r.json()["exit_code"] == 0, r
    ctxs = {c["id"]: c for c in daemon.http("GET", f"/v1/sandboxes/{sbx}/code/contexts",
                                            key=daemon.key_a).json()["contexts"]}
    assert ctxs["victim"]["state"] == "exited" and ctxs["victim"]["pid"] is None
    x = run(daemon, sbx, "doomed", context="victim")
    assert x["kernel_restarted"] is True and "signal 9" in x["restart_reason"], x
    assert x["error"]["name"] == "NameError"  # a new kernel: its state is gone
    x = run(daemon, sbx, "import os\nos.kill(os.getpid(), 9)", context="victim")
    assert x["error"]["name"] == "KernelDied" and "signal 9" in x["error"]["value"], x
    assert main_text(run(daemon, sbx, "1 + 1", context="victim")) == "2"
    daemon.http("DELETE", f"/v1/sandboxes/{sbx}/code/contexts/victim", key=daemon.key_a)


def test_two_contexts_do_not_share_variables(daemon, sbx):
    run(daemon, sbx, "secret = 'a'", context="ctx-a")
    x = run(daemon, sbx, "secret", context="ctx-b")
    assert x["error"]["name"] == "NameError"
    assert main_text(run(daemon, sbx, "secret", context="ctx-a")) == "'a'"
    for c in ("ctx-a", "ctx-b"):
        assert daemon.http("DELETE", f"/v1/sandboxes/{sbx}/code/contexts/{c}", key=daemon.key_a).status == 204


def test_output_is_streamed_as_it_is_produced(daemon, sbx):
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=120)
    body = {"code": "import time\nfor i in range(3):\n    print('tick', i)\n    time.sleep(1.5)\n'done'",
            "stream": True}
    conn.request("POST", f"/v1/sandboxes/{sbx}/code", body=json.dumps(body),
                 headers={"Authorization": f"Bearer {daemon.key_a}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "application/x-ndjson"
    lines, first_at, t0 = [], None, time.monotonic()
    while True:
        raw = resp.readline()
        if not raw:
            break
        lines.append(json.loads(raw))
        if lines[-1]["type"] == "stdout" and first_at is None:
            first_at = time.monotonic() - t0
    total = time.monotonic() - t0
    conn.close()
    assert first_at is not None and first_at < total - 2, (first_at, total)
    out = "".join(l["data"] for l in lines if l["type"] == "stdout")
    assert out == "tick 0\ntick 1\ntick 2\n"
    assert lines[-2] == {"type": "result", "is_main_result": True, "text": "'done'"}
    end = lines[-1]
    assert end["type"] == "end" and end["timed_out"] is False and end["execution_count"] >= 1


def test_a_client_that_leaves_interrupts_its_call(daemon, sbx):
    conn = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    conn.request("POST", f"/v1/sandboxes/{sbx}/code", body=json.dumps(
        {"code": "import time\nwhile True:\n    time.sleep(0.1)", "stream": True, "context": "leaver"}),
        headers={"Authorization": f"Bearer {daemon.key_a}", "Content-Type": "application/json"})
    assert conn.getresponse().status == 200
    conn.close()
    # The context is free again once the interrupt took: within the kill grace at most.
    deadline = time.monotonic() + 30
    while True:
        r = daemon.http("POST", f"/v1/sandboxes/{sbx}/code", body={"code": "'free'", "context": "leaver"},
                        key=daemon.key_a)
        if r.status == 200:
            break
        assert r.status == 409 and time.monotonic() < deadline, r
        time.sleep(0.5)
    assert main_text(r.json()) == "'free'"
    daemon.http("DELETE", f"/v1/sandboxes/{sbx}/code/contexts/leaver", key=daemon.key_a)


def test_bash_contexts_keep_variables_and_directory(daemon, sbx):
    x = run(daemon, sbx, "GREETING=hello; cd /tmp; echo set", language="bash")
    assert x["context"] == "bash" and x["language"] == "bash" and x["stdout"] == "set\n"
    x = run(daemon, sbx, "echo $GREETING from $(pwd); false", language="bash")
    assert x["stdout"] == "hello from /tmp\n"
    assert x["error"] == {"name": "ExitStatus", "value": "1", "traceback": ""}
    x = run(daemon, sbx, "while true; do :; done", language="bash", timeout="2s")
    assert x["timed_out"] is True and x["error"]["value"] == "130"
    assert run(daemon, sbx, "echo $GREETING", language="bash")["stdout"] == "hello\n"
    # A context's language is its own.
    r = daemon.http("POST", f"/v1/sandboxes/{sbx}/code", key=daemon.key_a,
                    body={"code": "1", "context": "bash", "language": "python"})
    assert r.status == 422 and "bash context" in r.json()["error"]["message"]


def test_contexts_api(daemon, sbx):
    base = f"/v1/sandboxes/{sbx}/code/contexts"
    r = daemon.http("POST", base, key=daemon.key_a, body={"id": "analysis", "cwd": "/home/user"})
    assert r.status == 201, r
    c = r.json()
    assert (c["id"], c["language"], c["cwd"], c["user"], c["state"]) == \
        ("analysis", "python", "/home/user", "user", "idle")
    assert isinstance(c["pid"], int)
    assert daemon.http("POST", base, key=daemon.key_a, body={"id": "analysis"}).status == 409
    r = daemon.http("POST", base, key=daemon.key_a, body={})
    assert r.status == 201 and r.json()["id"].startswith("ctx_")
    generated = r.json()["id"]
    assert main_text(run(daemon, sbx, "import os; os.getcwd()", context="analysis")) == "'/home/user'"
    run(daemon, sbx, "gone_after_restart = 1", context="analysis")
    r = daemon.http("POST", f"{base}/analysis/restart", key=daemon.key_a)
    assert r.status == 200 and r.json()["pid"] != c["pid"]
    assert run(daemon, sbx, "gone_after_restart", context="analysis")["error"]["name"] == "NameError"
    ids = [x["id"] for x in daemon.http("GET", base, key=daemon.key_a).json()["contexts"]]
    assert "analysis" in ids and generated in ids and "default" in ids
    for name in ("analysis", generated):
        assert daemon.http("DELETE", f"{base}/{name}", key=daemon.key_a).status == 204
    assert daemon.http("DELETE", f"{base}/analysis", key=daemon.key_a).status == 404
    assert daemon.http("POST", f"{base}/analysis/restart", key=daemon.key_a).status == 404
    # Bad input: clear 4xx answers.
    for body in ({"id": "no spaces"}, {"id": "x" * 65}, {"language": "cobol"}, {"cwd": "relative"}):
        r = daemon.http("POST", base, key=daemon.key_a, body=body)
        assert r.status in (400, 422) and r.json()["error"]["message"], (body, r)
    r = daemon.http("POST", base, key=daemon.key_a, body={"id": "nowhere", "cwd": "/no/such/dir"})
    assert r.status == 422 and "/no/such/dir" in r.json()["error"]["message"]
    for body in ({}, {"code": 1}, {"code": "1", "timeout": "forever"}, {"code": "1", "figure_formats": ["gif"]},
                 {"code": "1", "context": "../x"}, {"code": "x" * (128 * 1024 + 1)}):
        r = daemon.http("POST", f"/v1/sandboxes/{sbx}/code", key=daemon.key_a, body=body)
        assert r.status in (400, 413, 422) and r.json()["error"]["message"], (str(body)[:80], r)


def test_contexts_are_capped_and_a_busy_one_says_so(daemon, sbx):
    base = f"/v1/sandboxes/{sbx}/code/contexts"
    have = len(daemon.http("GET", base, key=daemon.key_a).json()["contexts"])
    made = []
    try:
        for i in range(16 - have):
            r = daemon.http("POST", base, key=daemon.key_a, body={"id": f"many{i}", "language": "bash"})
            assert r.status == 201, r
            made.append(f"many{i}")
        r = daemon.http("POST", base, key=daemon.key_a, body={"id": "one-too-many", "language": "bash"})
        assert r.status == 429 and "16" in r.json()["error"]["message"], r
        t = threading.Thread(target=run, args=(daemon, sbx, "sleep 3"), kwargs={"context": made[0]})
        t.start()
        time.sleep(1.5)
        r = daemon.http("POST", f"/v1/sandboxes/{sbx}/code", key=daemon.key_a,
                        body={"code": "echo", "context": made[0]})
        t.join()
        assert r.status == 409 and "running another call" in r.json()["error"]["message"], r
    finally:
        for name in made:
            daemon.http("DELETE", f"{base}/{name}", key=daemon.key_a)


def test_another_key_cannot_reach_the_contexts(daemon, sbx):
    r = daemon.http("POST", f"/v1/sandboxes/{sbx}/code", key=daemon.key_b, body={"code": "1"})
    assert r.status == 404
    assert daemon.http("GET", f"/v1/sandboxes/{sbx}/code/contexts", key=daemon.key_b).status == 404


def test_hostile_kernel_lines_are_dropped_and_capped(daemon, sbx):
    # Code in the kernel can write its event channel (fd 4) itself: what it sends is the guest's.
    code = r'''import os
def line(b):
    os.write(4, b + b"\n")
line(b"not json")
line(b'{"type": "result", "png": "not base64!", "text": "forged"}')
line(b'{"type": "result", "text": 5}')
line(b'{"type": "nonsense"}')
line(b'[1, 2]')
line(b'{"type": "result", "text": "kept", "is_main_result": true, "extra": "dropped"}')
line(b'{"type": "result", "text": "' + b"x" * (9 << 20) + b'"}')
'''
    x = run(daemon, sbx, code)
    assert x["results"] == [{"is_main_result": True, "text": "kept"}], str(x)[:500]
    assert x["results_truncated"] is True
    # Past 16 MiB of results in one call the rest is left out.
    x = run(daemon, sbx, "for i in range(40):\n    display('y' * (1 << 19))")
    assert 20 <= len(x["results"]) < 40 and x["results_truncated"] is True
    assert main_text(run(daemon, sbx, "'alive'")) == "'alive'"


def test_variables_survive_pause_and_resume(daemon, make_sandbox):
    s = make_sandbox(template="python")
    run(daemon, s.id, "import numpy as np\nkept = np.arange(5)")
    s.pause()
    x = run(daemon, s.id, "int(kept.sum())")  # the call resumes it
    assert main_text(x) == "10"


def test_forks_draw_different_random_numbers(daemon, make_sandbox):
    s = make_sandbox(template="python")
    run(daemon, s.id, "import random, numpy")
    kids = s.fork(2)
    draws = {main_text(run(daemon, k.id, "(random.random(), float(numpy.random.rand()))")) for k in kids}
    for k in kids:
        k.kill()
    assert len(draws) == 2, draws


def test_python_needs_an_image_with_python(daemon, make_sandbox):
    s = make_sandbox(template="base")
    r = daemon.http("POST", f"/v1/sandboxes/{s.id}/code", key=daemon.key_a, body={"code": "1"})
    assert r.status == 422 and "python3" in r.json()["error"]["message"], r
    x = run(daemon, s.id, "echo $((6 * 7))", language="bash")
    assert x["stdout"] == "42\n"
