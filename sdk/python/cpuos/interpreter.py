"""A code interpreter: an OpenAI-compatible model with one tool, run_python, in a sandbox; each
call a script run by `exec` (seed 003's loop) or a cell of one persistent kernel (`run_code`)."""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.error
import urllib.request
from types import TracebackType
from typing import Any, Dict, List, Literal, Optional, Tuple, Union

from ._client import Duration
from .errors import CpuosError, TimeoutError
from .run_code import CodeContext, ExecutionError, Result
from .sandbox import Sandbox

SYSTEM_PROMPT = ("You are a data analyst. Use run_python to compute every number. "
                 "Files are in /work. Save charts as PNG files in /work.")


def _run_python_tool(description: str) -> List[Dict[str, Any]]:
    """The tool list of one function, run_python(code), described as given."""
    return [{
        "type": "function",
        "function": {
            "name": "run_python",
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"code": {"type": "string"}},
                "required": ["code"],
            },
        },
    }]


#: The tool of mode "exec": each call a script of its own.
TOOLS = _run_python_tool("Run a Python 3 script in an isolated sandbox. "
                         "Files are in /work. Returns exit_code, stdout and stderr.")
#: The tool of mode "run_code": each call a cell of one kernel, like a notebook's.
CODE_TOOLS = _run_python_tool(
    "Run Python 3 code in an isolated sandbox, like a notebook cell: variables, imports and "
    "functions persist from one call to the next, and matplotlib figures are shown to the user. "
    "Files are in /work. Returns stdout, stderr, the error if the code raised, and the value of "
    "its last line.")

SCRIPT = "/tmp/run_python/main.py"  # outside /work, so it is not reported as a saved file


@dataclasses.dataclass
class Step:
    """One run_python call: the code and what it returned.

    Attributes:
        code: the code the model sent.
        exit_code: the script's exit status (None if a signal or the timeout ended it; always
            None in mode "run_code", where `error` says how it went).
        stdout, stderr: its whole output.
        results: its rich results (mode "run_code"): figures, displayed objects, the main result.
        error: the exception it raised (mode "run_code"), else None.
    """

    code: str
    exit_code: Optional[int]
    stdout: str
    stderr: str
    results: List[Result] = dataclasses.field(default_factory=list)
    error: Optional[ExecutionError] = None


@dataclasses.dataclass
class Answer:
    """The model's final answer.

    Attributes:
        text: the model's final text.
        files: the files it saved or changed in /work (path -> bytes).
        steps: its run_python calls, in order.
        charts: every PNG figure its calls produced, in order (mode "run_code").
    """

    text: str
    files: Dict[str, bytes]
    steps: List[Step]
    charts: List[bytes] = dataclasses.field(default_factory=list)

    def __str__(self) -> str:
        return self.text


class ModelError(CpuosError):
    """The model endpoint failed or answered something unusable."""


class CodeInterpreter:
    """Ask questions that a model answers by running Python in a cpuos sandbox.

    Without `sandbox`, one is created from `template` and killed by `close()` (or `with`).

    Args:
        sandbox: a sandbox to use (and leave running), else one is created.
        template: the template of the created sandbox.
        base_url: an OpenAI-compatible /v1 URL; default $OPENAI_BASE_URL.
        api_key: the model endpoint's key; default $OPENAI_API_KEY, else $GPUOS_API_KEY.
        model: the model name; default $OPENAI_MODEL, else "qwen3-32b".
        max_steps: model turns per question before giving up.
        system_prompt: the system message.
        exec_timeout: how long one run_python may run.
        sandbox_timeout: the created sandbox's timeout.
        max_file_bytes: larger files saved in /work are left out of the Answer.
        request_timeout: seconds to wait for the model endpoint.
        cpuos_api_key, cpuos_api_url: for creating the sandbox, as for `Sandbox.create`.
        mode: how run_python runs the code: "exec" (the default: a script of its own each time,
            seed 003's loop) or "run_code" (a cell of one persistent kernel: the model's
            variables persist between calls, no interpreter starts per call, and the figures
            come back in `Answer.charts`).
        context: the kernel of mode "run_code" (a context id or CodeContext; default the
            sandbox's "default" python context, which the python template starts with numpy,
            pandas and matplotlib imported).

    Raises:
        ValueError: no model endpoint URL, or an unknown mode.
        CpuosError: the sandbox could not be created (see `Sandbox.create`).
    """

    def __init__(self, sandbox: Optional[Sandbox] = None, template: str = "python",
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 model: Optional[str] = None, max_steps: int = 8,
                 system_prompt: str = SYSTEM_PROMPT, exec_timeout: Duration = "2m",
                 sandbox_timeout: Duration = "30m", max_file_bytes: int = 10 << 20,
                 request_timeout: float = 300, cpuos_api_key: Optional[str] = None,
                 cpuos_api_url: Optional[str] = None,
                 mode: Literal["exec", "run_code"] = "exec",
                 context: Optional[Union[str, CodeContext]] = None) -> None:
        if mode not in ("exec", "run_code"):
            raise ValueError(f'mode is "exec" or "run_code", not {mode!r}')
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or "").rstrip("/")
        if not self.base_url:
            raise ValueError("set OPENAI_BASE_URL or pass base_url= (an OpenAI-compatible /v1 URL)")
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or os.environ.get("GPUOS_API_KEY")
        self.model = model or os.environ.get("OPENAI_MODEL") or "qwen3-32b"
        self.max_steps = max_steps
        self.system_prompt = system_prompt
        self.exec_timeout = exec_timeout
        self.max_file_bytes = max_file_bytes
        self.request_timeout = request_timeout
        self.mode = mode
        self.context = context
        self._owned = sandbox is None
        self.sandbox = sandbox or Sandbox.create(template=template, timeout=sandbox_timeout,
                                                 api_key=cpuos_api_key, api_url=cpuos_api_url)

    def __enter__(self) -> CodeInterpreter:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        self.close()
        return False

    def close(self) -> None:
        """Kill the sandbox if this interpreter created it.

        Raises:
            CpuosError: the daemon failed or cannot be reached.
        """
        if self._owned:
            self.sandbox.kill()
            self._owned = False

    def run_python(self, code: str) -> Tuple[str, Step]:
        """Run Python code as the tool does: a script in /work (mode "exec") or a cell of the
        kernel (mode "run_code").

        Args:
            code: the code.

        Returns:
            (the tool message content: JSON with the tails of stdout and stderr, and the exit_code
            (mode "exec") or the error and the main result's text (mode "run_code"), never image
            data; the Step with the whole output). Code stopped by `exec_timeout` is a result too.

        Raises:
            CpuosError: the sandbox failed or cannot be reached.
        """
        if self.mode == "run_code":
            return self._run_cell(code)
        self.sandbox.files.write(SCRIPT, code)
        try:
            run = self.sandbox.exec(f"cd /work && python3 {SCRIPT}", timeout=self.exec_timeout)
        except TimeoutError as e:
            if e.result is None:
                raise
            run = e.result
            run.stderr += f"\n[killed: the script ran longer than {self.exec_timeout}]"
        content = json.dumps({
            "exit_code": run.exit_code,
            "stdout": run.stdout[-4000:],
            "stderr": run.stderr[-2000:],
        })
        return content, Step(code, run.exit_code, run.stdout, run.stderr)

    def _run_cell(self, code: str) -> Tuple[str, Step]:
        """run_python in mode "run_code": a cell of the interpreter's kernel."""
        run = self.sandbox.run_code(code, context=self.context, timeout=self.exec_timeout)
        stdout, stderr = "".join(run.logs.stdout), "".join(run.logs.stderr)
        if run.kernel_restarted:
            stderr += (f"\n[the python kernel had ended ({run.restart_reason or 'no reason given'}) "
                       "and was restarted: variables from earlier calls are gone]")
        if run.timed_out:
            stderr += f"\n[interrupted: the code ran longer than {self.exec_timeout}]"
        error = None if run.error is None else {
            "name": run.error.name, "value": run.error.value[:1000],
            "traceback": run.error.traceback[-2000:]}
        content = json.dumps({
            "stdout": stdout[-4000:],
            "stderr": stderr[-2000:],
            "error": error,
            "result": None if run.text is None else run.text[:4000],
        })
        return content, Step(code, None, stdout, stderr, results=run.results, error=run.error)

    def ask(self, question: str) -> Answer:
        """Run the tool loop for one question.

        Args:
            question: the user's message.

        Returns:
            The Answer ("Stopped after too many steps." after `max_steps` turns of tool calls).

        Raises:
            ModelError: the model endpoint failed or answered something unusable.
            CpuosError: the sandbox failed or cannot be reached.
        """
        before = self._snapshot()
        messages: List[Dict[str, Any]] = [{"role": "system", "content": self.system_prompt},
                                          {"role": "user", "content": question}]
        steps: List[Step] = []
        text: Optional[str] = None
        for _ in range(self.max_steps):
            msg = self._complete(messages)
            calls = msg.get("tool_calls") or []
            turn: Dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
            if calls:
                turn["tool_calls"] = calls
            messages.append(turn)
            if not calls:
                text = msg.get("content") or ""
                break
            for call in calls:
                messages.append({"role": "tool", "tool_call_id": call.get("id"),
                                 "content": self._tool(call, steps)})
        if text is None:
            text = "Stopped after too many steps."
        charts = [r.png for step in steps for r in step.results if r.png is not None]
        return Answer(text=text, files=self._saved(before), steps=steps, charts=charts)

    def _tool(self, call: Dict[str, Any], steps: List[Step]) -> str:
        fn = call.get("function") or {}
        if fn.get("name") != "run_python":
            return json.dumps({"error": f"unknown tool {fn.get('name')!r}; the only tool is run_python"})
        try:
            args = json.loads(fn.get("arguments") or "{}")
            code = args["code"]
        except (ValueError, KeyError, TypeError):
            return json.dumps({"error": 'arguments must be JSON like {"code": "print(1)"}'})
        content, step = self.run_python(code)
        steps.append(step)
        return content

    def _complete(self, messages: List[Dict[str, Any]]) -> Dict[str, Any]:
        tools = CODE_TOOLS if self.mode == "run_code" else TOOLS
        body = json.dumps({"model": self.model, "messages": messages, "tools": tools}).encode()
        req = urllib.request.Request(self.base_url + "/chat/completions", data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        try:
            with urllib.request.urlopen(req, timeout=self.request_timeout) as resp:
                reply = json.load(resp)
        except urllib.error.HTTPError as e:
            detail = e.read()[:500].decode("utf-8", "replace")
            raise ModelError(f"model endpoint answered {e.code}: {detail}", status=e.code) from e
        except (OSError, ValueError) as e:
            raise ModelError(f"model endpoint {self.base_url} failed: {e}") from e
        try:
            message: Dict[str, Any] = reply["choices"][0]["message"]
            return message
        except (KeyError, IndexError, TypeError) as e:
            raise ModelError(f"model endpoint sent no message: {str(reply)[:300]}") from e

    def _snapshot(self) -> Dict[str, Tuple[Optional[int], Optional[str]]]:
        try:
            entries = self.sandbox.files.list("/work", depth=8)
        except CpuosError:
            return {}
        return {e.path: (e.size, e.mtime) for e in entries if e.type == "file"}

    def _saved(self, before: Dict[str, Tuple[Optional[int], Optional[str]]]) -> Dict[str, bytes]:
        files: Dict[str, bytes] = {}
        for path, (size, mtime) in self._snapshot().items():
            if before.get(path) == (size, mtime) or (size or 0) > self.max_file_bytes:
                continue
            try:
                files[path] = self.sandbox.files.read(path)
            except CpuosError:
                continue
        return files
