"""Sandbox.run_code and its contexts through the Python SDK, against a real cpuosd and a real
python-template microVM: state that persists, a figure as PNG bytes, a DataFrame as HTML, an
error that leaves the context alive, callbacks while the code runs, a timeout, bash, contexts
and a busy context's conflict."""

import threading
import time

import pytest

import cpuos
from fake_openai import png_size


def test_state_persists_between_calls(sandbox):
    first = sandbox.run_code("persist_x = 41\nprint('set')")
    assert (first.logs.stdout, first.error, first.text, first.results) == (["set\n"], None, None, [])
    second = sandbox.run_code("persist_x + 1")
    assert second.text == "42" and second.results[0].is_main_result, second
    assert (second.context, second.language) == ("default", "python")
    assert second.execution_count == first.execution_count + 1
    assert first.execution_count == 1  # the template's and the warm pool's warm-ups are no cells
    assert sandbox.run_code("persist_x + 1;").results == []  # a notebook's rule: ";" shows nothing


def test_a_figure_comes_back_as_png_bytes(sandbox, tmp_path):
    ex = sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\n"
                          "plt.show()\nprint('after show')")
    assert ex.error is None, ex.error
    [fig] = ex.results
    assert fig.text.startswith("<Figure") and not fig.is_main_result, fig
    width, height = png_size(fig.png)
    assert width > 100 and height > 100
    assert fig.save(tmp_path / "fig.png") == "png" and (tmp_path / "fig.png").read_bytes() == fig.png
    assert ex.logs.stdout == ["after show\n"]
    both = sandbox.run_code("plt.plot([1, 2]);", figure_formats=["png", "svg"])
    [fig] = both.results  # shown at the end of the call, since nothing showed it
    assert "<svg" in fig.svg and png_size(fig.png)[0] > 0 and fig.formats() == ["text", "svg", "png"]
    mixed = sandbox.run_code("plt.plot([2, 1]);\n{'k': 2}")  # a figure and a value: in any order
    assert mixed.text == "{'k': 2}" and [r.png is not None for r in mixed.results].count(True) == 1


def test_a_dataframe_comes_back_as_html(sandbox):
    ex = sandbox.run_code("import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'n': [3, 5]})")
    assert ex.error is None, ex.error
    [main] = ex.results
    assert main.is_main_result and "<table" in main.html and "Lima" in main.html, main
    assert "city" in ex.text and "Oslo" in ex.text


def test_an_error_then_a_working_call(sandbox):
    ex = sandbox.run_code("err_y = 5\n1 / 0")
    assert (ex.error.name, ex.error.value) == ("ZeroDivisionError", "division by zero"), ex
    assert "<cell" in ex.error.traceback and "1 / 0" in ex.error.traceback
    assert ex.results == [] and ex.text is None
    assert sandbox.run_code("err_y * 2").text == "10"  # the context lives on, with what ran
    assert sandbox.run_code("def broken(:").error.name == "SyntaxError"
    assert sandbox.run_code("err_y").text == "5"


def test_callbacks_are_called_while_the_code_runs(sandbox):
    seen = []
    t0 = time.monotonic()

    def note(kind):
        return lambda value: seen.append((kind, value, time.monotonic() - t0))

    ex = sandbox.run_code("import sys, time\nprint('first', flush=True)\ntime.sleep(4)\n"
                          "display({'a': 1})\nprint('oops', file=sys.stderr)\nraise ValueError('late')",
                          on_stdout=note("stdout"), on_stderr=note("stderr"),
                          on_result=note("result"), on_error=note("error"))
    took = time.monotonic() - t0
    # stdout, the results and the error travel apart: only the first line's order is sure.
    assert seen[0][:2] == ("stdout", "first\n") and seen[0][2] < took - 2, (seen, took)
    assert sorted(kind for kind, _, _ in seen) == ["error", "result", "stderr", "stdout"], seen
    by_kind = {kind: value for kind, value, _ in seen}
    assert by_kind["result"].text == "{'a': 1}" and by_kind["result"] is ex.results[0]
    assert by_kind["error"] is ex.error and ex.error.name == "ValueError"
    assert "".join(ex.logs.stderr) == "oops\n" and ex.logs.stdout == ["first\n"]


def test_a_timeout_interrupts_and_the_context_lives_on(sandbox):
    t0 = time.monotonic()
    ex = sandbox.run_code("import time\ntimeout_z = 1\nwhile True:\n    time.sleep(0.1)", timeout=2)
    assert ex.timed_out and ex.error.name == "KeyboardInterrupt", ex
    assert time.monotonic() - t0 < 60
    assert sandbox.run_code("timeout_z").text == "1"


def test_bash_keeps_its_shell(sandbox):
    ex = sandbox.run_code("cd /tmp && bash_v=7 && echo hi", language="bash")
    assert ("".join(ex.logs.stdout), ex.error, ex.context) == ("hi\n", None, "bash"), ex
    ex = sandbox.run_code("echo $bash_v $PWD; false", language="bash")
    assert "".join(ex.logs.stdout) == "7 /tmp\n"
    assert (ex.error.name, ex.error.value) == ("ExitStatus", "1")


def test_contexts(sandbox):
    ctx = sandbox.create_code_context(cwd="/tmp")
    assert ctx.id.startswith("ctx_") and (ctx.language, ctx.cwd, ctx.user) == ("python", "/tmp", "user")
    try:
        ex = sandbox.run_code("import os\nctx_w = 3\nos.getcwd()", context=ctx)
        assert (ex.text, ex.context) == ("'/tmp'", ctx.id), ex
        assert sandbox.run_code("'ctx_w' in globals()").text == "False"  # not in "default"
        listed = {c.id: c for c in sandbox.list_code_contexts()}
        assert "default" in listed and listed[ctx.id].state == "idle" and listed[ctx.id].pid
        assert sandbox.restart_code_context(ctx).id == ctx.id
        assert sandbox.run_code("'ctx_w' in globals()", context=ctx).text == "False"
        with pytest.raises(cpuos.ConflictError):
            sandbox.create_code_context(id=ctx.id)
        with pytest.raises(cpuos.BadRequestError):
            sandbox.run_code("echo", language="bash", context=ctx)  # not the context's language
        with pytest.raises(cpuos.BadRequestError):
            sandbox.create_code_context(id="no/slash")
    finally:
        sandbox.remove_code_context(ctx)
    assert ctx.id not in {c.id for c in sandbox.list_code_contexts()}
    with pytest.raises(cpuos.NotFoundError):
        sandbox.restart_code_context(ctx)


def test_a_busy_context_is_a_conflict(sandbox):
    ctx = sandbox.create_code_context()
    got = {}

    def slow():
        got["ex"] = sandbox.run_code("import time\ntime.sleep(4)\n'slept'", context=ctx)

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and thread.is_alive():
            if any(c.id == ctx.id and c.state == "busy" for c in sandbox.list_code_contexts()):
                break
            time.sleep(0.2)
        with pytest.raises(cpuos.ConflictError):
            sandbox.run_code("1", context=ctx)
    finally:
        thread.join(120)
        sandbox.remove_code_context(ctx)
    assert got["ex"].text == "'slept'"
