"""A code interpreter: an OpenAI-compatible model with one tool, run_python, in a sandbox."""

import dataclasses
import json
import os
import urllib.error
import urllib.request
from typing import Dict, List, Optional

from .errors import CpuosError, TimeoutError
from .sandbox import Sandbox

SYSTEM_PROMPT = ("You are a data analyst. Use run_python to compute every number. "
                 "Files are in /work. Save charts as PNG files in /work.")

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

SCRIPT = "/tmp/run_python/main.py"  # outside /work, so it is not reported as a saved file


@dataclasses.dataclass
class Step:
    """One run_python call: the code and what it returned."""

    code: str
    exit_code: Optional[int]
    stdout: str
    stderr: str


@dataclasses.dataclass
class Answer:
    """The model's final text, the files it saved in /work (path -> bytes) and its tool runs."""

    text: str
    files: Dict[str, bytes]
    steps: List[Step]

    def __str__(self):
        return self.text


class ModelError(CpuosError):
    """The model endpoint failed or answered something unusable."""


class CodeInterpreter:
    """Ask questions that a model answers by running Python in a cpuos sandbox.

    Without `sandbox`, one is created from `template` and killed by `close()` (or `with`)."""

    def __init__(self, sandbox=None, template="python", base_url=None, api_key=None, model=None,
                 max_steps=8, system_prompt=SYSTEM_PROMPT, exec_timeout="2m",
                 sandbox_timeout="30m", max_file_bytes=10 << 20, request_timeout=300,
                 cpuos_api_key=None, cpuos_api_url=None):
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
        self._owned = sandbox is None
        self.sandbox = sandbox or Sandbox.create(template=template, timeout=sandbox_timeout,
                                                 api_key=cpuos_api_key, api_url=cpuos_api_url)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        """Kill the sandbox if this interpreter created it."""
        if self._owned:
            self.sandbox.kill()
            self._owned = False

    def run_python(self, code):
        """Run code in /work; return (tool message content, Step). Output is truncated."""
        self.sandbox.files.write(SCRIPT, code)
        try:
            run = self.sandbox.exec(f"cd /work && python3 {SCRIPT}", timeout=self.exec_timeout)
        except TimeoutError as e:
            run = e.result
            run.stderr += f"\n[killed: the script ran longer than {self.exec_timeout}]"
        content = json.dumps({
            "exit_code": run.exit_code,
            "stdout": run.stdout[-4000:],
            "stderr": run.stderr[-2000:],
        })
        return content, Step(code, run.exit_code, run.stdout, run.stderr)

    def ask(self, question):
        """Run the tool loop for one question; return an Answer."""
        before = self._snapshot()
        messages = [{"role": "system", "content": self.system_prompt},
                    {"role": "user", "content": question}]
        steps, text = [], None
        for _ in range(self.max_steps):
            msg = self._complete(messages)
            calls = msg.get("tool_calls") or []
            turn = {"role": "assistant", "content": msg.get("content")}
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
        return Answer(text=text, files=self._saved(before), steps=steps)

    def _tool(self, call, steps):
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

    def _complete(self, messages):
        body = json.dumps({"model": self.model, "messages": messages, "tools": TOOLS}).encode()
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
            return reply["choices"][0]["message"]
        except (KeyError, IndexError, TypeError) as e:
            raise ModelError(f"model endpoint sent no message: {str(reply)[:300]}") from e

    def _snapshot(self):
        try:
            entries = self.sandbox.files.list("/work", depth=8)
        except CpuosError:
            return {}
        return {e.path: (e.size, e.mtime) for e in entries if e.type == "file"}

    def _saved(self, before):
        files = {}
        for path, (size, mtime) in self._snapshot().items():
            if before.get(path) == (size, mtime) or (size or 0) > self.max_file_bytes:
                continue
            try:
                files[path] = self.sandbox.files.read(path)
            except CpuosError:
                continue
        return files
