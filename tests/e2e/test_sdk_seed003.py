"""Seed 003 ("Build a code interpreter with open models"): its program as written, through the
real `openai` package, against a real cpuosd and a scripted OpenAI-compatible server; then the
next turn of the conversation, resumed from the session id that the program's last line kept."""

import hashlib
import json
import re
import runpy

import openai  # noqa: F401  (the program below imports it; fail here if it is missing)
import pytest

import cpuos
from fake_openai import FakeOpenAI, grew_most, png_size, sales_csv

# The page's code blocks, verbatim. The test changes one thing: the base URL.
SEED_003_PROGRAM = '''
import json
import os

from cpuos import Sandbox
from openai import OpenAI

llm = OpenAI(base_url="https://gpuos.si/v1", api_key=os.environ["GPUOS_API_KEY"])
sbx = Sandbox.create(template="python", timeout="30m")

TOOLS = [{
    "type": "function",
    "function": {
        "name": "run_python",
        "description": "Run a Python 3 script in an isolated sandbox. "
        "Files are in /work. Returns exit_code, stdout and stderr.",
        "parameters": {
            "type": "object",
            "properties": {"code": {"type": "string"}},
            "required": ["code"],
        },
    },
}]


def run_python(code: str) -> str:
    sbx.files.write("/work/main.py", code)
    run = sbx.exec("cd /work && python main.py", timeout="2m")
    return json.dumps({
        "exit_code": run.exit_code,
        "stdout": run.stdout[-4000:],
        "stderr": run.stderr[-2000:],
    })


MAX_STEPS = 8


def ask(question: str) -> str:
    messages = [
        {"role": "system", "content": "You are a data analyst. Use run_python "
         "to compute every number. Save charts as PNG files in /work."},
        {"role": "user", "content": question},
    ]
    for _ in range(MAX_STEPS):
        reply = llm.chat.completions.create(
            model="qwen3-32b", messages=messages, tools=TOOLS
        )
        msg = reply.choices[0].message
        messages.append(msg)
        if not msg.tool_calls:
            return msg.content
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments)
            messages.append({
                "role": "tool",
                "tool_call_id": call.id,
                "content": run_python(args["code"]),
            })
    return "Stopped after too many steps."


with open("sales.csv", "rb") as f:
    sbx.files.write("/work/sales.csv", f.read())

print(ask("Load /work/sales.csv, plot revenue per month to /work/chart.png "
          "and tell me which month grew the most."))

with open("chart.png", "wb") as f:
    f.write(sbx.files.read("/work/chart.png"))
session = sbx.pause()  # resume with Sandbox.resume(session) on the next question
'''


@pytest.fixture
def alice_cleanup(daemon):
    """Kills the sandboxes of alice's that the test created, running or paused."""
    before = {s.id for s in cpuos.Sandbox.list()}
    yield
    for s in cpuos.Sandbox.list():
        if s.id not in before and s.state in ("running", "paused"):
            s.kill()


def test_seed003_program(daemon, alice_cleanup, tmp_path, monkeypatch, capsys):
    data = sales_csv()
    (tmp_path / "sales.csv").write_bytes(data)
    program = tmp_path / "seed003.py"
    with FakeOpenAI() as fake:
        assert SEED_003_PROGRAM.count("https://gpuos.si/v1") == 1
        program.write_text(SEED_003_PROGRAM.replace("https://gpuos.si/v1", fake.base_url))
        monkeypatch.setenv("GPUOS_API_KEY", "gpuos-test-key")
        monkeypatch.chdir(tmp_path)
        ns = runpy.run_path(str(program), run_name="__main__")
    answer = capsys.readouterr().out

    assert grew_most(data) == "2025-07"
    assert "2025-07" in answer, answer
    width, height = png_size((tmp_path / "chart.png").read_bytes())
    assert width > 0 and height > 0

    tools = fake.tool_messages()
    assert len(tools) == 1, fake.requests
    result = json.loads(tools[0]["content"])
    assert result["exit_code"] == 0, result
    assert "GREW_MOST 2025-07" in result["stdout"]
    headers, first = fake.requests[0]
    assert headers.get("authorization") == "Bearer gpuos-test-key"
    assert first["model"] == "qwen3-32b" and first["tools"][0]["function"]["name"] == "run_python"

    # The program's last line paused the sandbox and kept the session id.
    sbx, session = ns["sbx"], ns["session"]
    assert re.fullmatch(r"ses_[0-9a-f]{16}", session), session
    assert sbx.state == "paused" and sbx.info().state == "paused"

    # The next question, maybe minutes later: resumed as a program that kept only the session id.
    resumed = cpuos.Sandbox.resume(session)
    assert (resumed.id, resumed.state) == (sbx.id, "running")
    chart = (tmp_path / "chart.png").read_bytes()
    run = resumed.exec("cd /work && python -c \"import hashlib; "
                       "print(hashlib.sha256(open('chart.png', 'rb').read()).hexdigest())\"",
                       timeout="2m")
    assert run.exit_code == 0, run.stderr
    assert run.stdout.strip() == hashlib.sha256(chart).hexdigest()  # what the first turn saved
    assert resumed.files.read("/work/sales.csv") == data
    assert resumed.files.read("/work/main.py").decode() == fake.code


def test_code_interpreter(daemon, tmp_path):
    data = sales_csv(seed=11)
    expected = grew_most(data)
    with FakeOpenAI() as fake, cpuos.CodeInterpreter(base_url=fake.base_url, api_key="k") as ci:
        ci.sandbox.files.write("/work/sales.csv", data)
        answer = ci.ask("Load /work/sales.csv, plot revenue per month to /work/chart.png "
                        "and tell me which month grew the most.")
        sbx = ci.sandbox
    assert expected in answer.text, answer
    assert sorted(answer.files) == ["/work/chart.png"], sorted(answer.files)
    assert png_size(answer.files["/work/chart.png"])[0] > 0
    assert len(answer.steps) == 1 and answer.steps[0].exit_code == 0, answer.steps
    assert json.loads(fake.tool_messages()[0]["content"])["exit_code"] == 0
    assert sbx.info().state == "stopped"  # the interpreter created it, so it killed it


def test_code_interpreter_step_cap(daemon, sandbox):
    with FakeOpenAI(code="print('again')", loop=True) as fake:
        ci = cpuos.CodeInterpreter(sandbox=sandbox, base_url=fake.base_url, api_key="k", max_steps=3)
        answer = ci.ask("loop")
        ci.close()
    assert answer.text == "Stopped after too many steps."
    assert [s.stdout for s in answer.steps] == ["again\n"] * 3
    assert len(fake.requests) == 3
    assert sandbox.info().state == "running"  # not the interpreter's to kill


QUESTION = ("Load /work/sales.csv, plot revenue per month to /work/chart.png "
            "and tell me which month grew the most.")


def test_code_interpreter_run_code_mode(daemon):
    data = sales_csv(seed=5)
    expected = grew_most(data)
    with FakeOpenAI() as fake, cpuos.CodeInterpreter(base_url=fake.base_url, api_key="k",
                                                     mode="run_code") as ci:
        ci.sandbox.files.write("/work/sales.csv", data)
        answer = ci.ask(QUESTION)
        later = ci.sandbox.run_code("str(best)")  # the model's variables live on in the kernel
    assert expected in answer.text, answer
    assert len(answer.charts) == 1 and png_size(answer.charts[0])[0] > 0, answer.charts
    assert sorted(answer.files) == ["/work/chart.png"]  # the code saved it as well
    [step] = answer.steps
    assert (step.exit_code, step.error) == (None, None) and f"GREW_MOST {expected}" in step.stdout
    assert [r.png for r in step.results] == answer.charts
    content = fake.tool_messages()[0]["content"]
    tool = json.loads(content)
    assert sorted(tool) == ["error", "result", "stderr", "stdout"] and tool["error"] is None, tool
    assert "iVBOR" not in content and len(content) < 8000  # no image data for the model
    assert "notebook cell" in fake.requests[0][1]["tools"][0]["function"]["description"]
    assert later.text == repr(expected)


def test_code_interpreter_run_code_mode_keeps_state_in_its_context(daemon, sandbox):
    ctx = sandbox.create_code_context()
    code = "calls = globals().get('calls', 0) + 1\nprint('call', calls)"
    try:
        with FakeOpenAI(code=code, loop=True) as fake:
            ci = cpuos.CodeInterpreter(sandbox=sandbox, base_url=fake.base_url, api_key="k",
                                       max_steps=3, mode="run_code", context=ctx)
            answer = ci.ask("count")
            ci.close()
        assert [s.stdout for s in answer.steps] == ["call 1\n", "call 2\n", "call 3\n"]
        assert answer.charts == [] and sandbox.run_code("'calls' in globals()").text == "False"
    finally:
        sandbox.remove_code_context(ctx)
