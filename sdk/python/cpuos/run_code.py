"""The code interpreter: `Sandbox.run_code` in a stateful kernel, its Execution with rich
results (text, HTML, PNG figures, ...), and the kernels' contexts (docs/api.md, "Code")."""

from __future__ import annotations

import base64
import binascii
import dataclasses
import os
from typing import Any, Callable, Iterable, List, Mapping, Optional, Union

from ._client import Client, Duration, Response, duration, path_segment, seconds
from .errors import CpuosError
from .process import Tail, events

#: The representations a result may have that are text, as the API names them.
TEXT_FORMATS = ("text", "html", "markdown", "svg", "latex", "javascript")
#: Those that are binary: base64 in the API, bytes in the SDK.
BINARY_FORMATS = ("png", "jpeg", "pdf")
_IMAGE_SUFFIXES = {".png": "png", ".jpg": "jpeg", ".jpeg": "jpeg", ".svg": "svg", ".pdf": "pdf"}
_DEFAULT_TIMEOUT = "5m"  # the daemon's, for a call that names none


@dataclasses.dataclass(repr=False)
class Result:
    """One rich result of a call: a figure, what `display(obj)` was given, or the value of the
    code's last line (`is_main_result`). Each attribute is one representation of the object, None
    when it has not that one.

    Attributes:
        text: its `repr`.
        html, markdown, svg, latex, javascript: those representations, as text.
        json: a JSON representation (any JSON value).
        png, jpeg, pdf: images and documents, as bytes.
        is_main_result: whether it is the value of the code's last line.
        extra: representations this SDK does not know, as the API sent them.
    """

    text: Optional[str] = None
    html: Optional[str] = None
    markdown: Optional[str] = None
    svg: Optional[str] = None
    latex: Optional[str] = None
    javascript: Optional[str] = None
    json: Any = None
    png: Optional[bytes] = None
    jpeg: Optional[bytes] = None
    pdf: Optional[bytes] = None
    is_main_result: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Result:
        """A result in an API answer (or a stream's "result" line), base64 decoded.

        Args:
            d: the decoded JSON object.

        Returns:
            The Result.

        Raises:
            CpuosError: a text representation that is not a string, or a binary one that is not
                base64.
        """
        result = cls(is_main_result=d.get("is_main_result") is True, json=d.get("json"))
        for key, value in d.items():
            if value is None or key in ("type", "is_main_result", "json"):
                continue
            if key in TEXT_FORMATS:
                if not isinstance(value, str):
                    raise CpuosError(f"a result's {key} is a {type(value).__name__}, not text")
                setattr(result, key, value)
            elif key in BINARY_FORMATS:
                setattr(result, key, _decode_base64(value, key))
            else:
                result.extra[key] = value
        return result

    def formats(self) -> List[str]:
        """The names of the representations it has ("text", "html", "png", ...), then those in
        `extra`."""
        known = [f for f in (*TEXT_FORMATS, "json", *BINARY_FORMATS) if getattr(self, f) is not None]
        return known + list(self.extra)

    def save(self, path: Union[str, os.PathLike[str]]) -> str:
        """Write its image to a file: the format the path's suffix names (.png, .jpg, .jpeg, .svg,
        .pdf), else the first it has of png, jpeg, svg and pdf.

        Args:
            path: the file to write.

        Returns:
            The format written, e.g. "png".

        Raises:
            ValueError: it has no image, or not the one the suffix names.
            OSError: the file cannot be written.
        """
        wanted = _IMAGE_SUFFIXES.get(os.path.splitext(os.fspath(path))[1].lower())
        have = [f for f in ("png", "jpeg", "svg", "pdf") if getattr(self, f) is not None]
        if not have:
            raise ValueError(f"this result has no image (it has {', '.join(self.formats()) or 'nothing'})")
        if wanted is not None and wanted not in have:
            raise ValueError(f"this result has no {wanted} (it has {', '.join(have)})")
        fmt = wanted or have[0]
        data = getattr(self, fmt)
        with open(path, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
        return fmt

    def __repr__(self) -> str:
        shown = []
        for f in self.formats():
            value = self.extra[f] if f in self.extra else getattr(self, f)
            if isinstance(value, bytes):
                shown.append(f"{f}=<{len(value)} bytes>")
            else:
                text = repr(value)
                shown.append(f"{f}={text[:60] + '...' if len(text) > 60 else text}")
        main = ", is_main_result=True" if self.is_main_result else ""
        return f"Result({', '.join(shown)}{main})"


@dataclasses.dataclass
class Logs:
    """What a call printed, as the chunks it came in (one chunk each without streaming).

    Attributes:
        stdout: the standard output's chunks.
        stderr: the standard error's chunks.
    """

    stdout: List[str] = dataclasses.field(default_factory=list)
    stderr: List[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ExecutionError:
    """The exception a call's code raised; the context lives on. Data, not a Python exception.

    Attributes:
        name: the exception's class, e.g. "ZeroDivisionError" ("KernelDied" when the kernel died,
            "ExitStatus" for bash's non-zero status).
        value: its message, e.g. "division by zero".
        traceback: the formatted traceback ("" when there is none).
    """

    name: str
    value: str
    traceback: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ExecutionError:
        """The error of an API answer (or a stream's "error" line); missing fields are ""."""
        return cls(name=str(d.get("name") or ""), value=str(d.get("value") or ""),
                   traceback=str(d.get("traceback") or ""))

    def __str__(self) -> str:
        return f"{self.name}: {self.value}" if self.value else self.name


@dataclasses.dataclass(repr=False)
class Execution:
    """What `Sandbox.run_code` did. An exception in the code is `error`, a timeout `timed_out`:
    neither is raised.

    Attributes:
        results: the rich results in the order they came: what `display` was given and the
            figures `plt.show()` showed, then the main result (`is_main_result`; `text` is its
            text), then the figures still open.
        logs: the output (each stream's last 1 MiB).
        error: the exception the code raised, else None.
        context: the id of the context it ran in.
        language: "python" or "bash".
        execution_count: the context's count of calls, this one included.
        timed_out: whether its timeout interrupted it.
        kernel_restarted: whether the context's kernel had died and was started anew for it
            (its state is gone), and `restart_reason` why.
        results_truncated: whether results were left out (past 16 MiB in all, or 8 MiB one).
        stdout_truncated, stderr_truncated: whether a stream lost its beginning.
        duration_ms: how long it ran.
    """

    results: List[Result] = dataclasses.field(default_factory=list)
    logs: Logs = dataclasses.field(default_factory=Logs)
    error: Optional[ExecutionError] = None
    context: Optional[str] = None
    language: Optional[str] = None
    execution_count: Optional[int] = None
    timed_out: bool = False
    kernel_restarted: bool = False
    restart_reason: Optional[str] = None
    results_truncated: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[int] = None

    @property
    def text(self) -> Optional[str]:
        """The main result's text (the value of the code's last line), or None."""
        return next((r.text for r in self.results if r.is_main_result), None)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Execution:
        """The execution of a whole (not streamed) API answer.

        Raises:
            CpuosError: a result as for `Result.from_json`, or results that are not a list.
        """
        results = d.get("results") or []
        if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
            raise CpuosError("cpuosd sent results that are not a list of objects")
        out, err = d.get("stdout"), d.get("stderr")
        execution = cls(results=[Result.from_json(r) for r in results],
                        logs=Logs(stdout=[str(out)] if out else [], stderr=[str(err)] if err else []))
        error = d.get("error")
        if isinstance(error, dict):
            execution.error = ExecutionError.from_json(error)
        execution._end(d)
        return execution

    def _end(self, d: Mapping[str, Any]) -> None:
        """Take the fields of an answer or of a stream's "end" line."""
        self.context = d.get("context")
        self.language = d.get("language")
        self.execution_count = d.get("execution_count")
        self.restart_reason = d.get("restart_reason")
        self.duration_ms = d.get("duration_ms")
        for flag in ("timed_out", "kernel_restarted", "results_truncated", "stdout_truncated",
                     "stderr_truncated"):
            setattr(self, flag, getattr(self, flag) or d.get(flag) is True)

    def __repr__(self) -> str:
        parts = [f"results={self.results!r}"]
        for name, chunks in (("stdout", self.logs.stdout), ("stderr", self.logs.stderr)):
            if chunks:
                text = "".join(chunks)
                parts.append(f"{name}={text[:80] + '...' if len(text) > 80 else text!r}")
        if self.error is not None:
            parts.append(f"error={str(self.error)!r}")
        for flag in ("timed_out", "kernel_restarted", "results_truncated"):
            if getattr(self, flag):
                parts.append(f"{flag}=True")
        parts.append(f"execution_count={self.execution_count}")
        return f"Execution({', '.join(parts)})"


@dataclasses.dataclass
class CodeContext:
    """A context: one kernel in the sandbox, whose variables, imports and working directory
    persist from one `run_code` to the next.

    Attributes:
        id: its id ("default" and "bash" are the languages' own).
        language: "python" or "bash".
        cwd: the kernel's starting directory.
        user: the user it runs as.
        state: "idle", "busy" (a call runs in it) or "exited" (the next call starts a new kernel).
        pid: the kernel's process id in the processes API, or None once exited.
        data: the object as the API sent it.
    """

    id: str
    language: Optional[str] = None
    cwd: Optional[str] = None
    user: Optional[str] = None
    state: Optional[str] = None
    pid: Optional[int] = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Any) -> CodeContext:
        """A context in an API answer.

        Raises:
            CpuosError: `d` is not an object with an id.
        """
        if not isinstance(d, dict) or not isinstance(d.get("id"), str) or not d["id"]:
            raise CpuosError(f"cpuosd sent a code context without an id: {str(d)[:200]}")
        return cls(id=d["id"], language=d.get("language"), cwd=d.get("cwd"), user=d.get("user"),
                   state=d.get("state"), pid=d.get("pid"), data=dict(d))


#: A callback for text output chunks as the code prints them.
OutputHandler = Callable[[str], object]
#: A callback for each rich result as it comes.
ResultHandler = Callable[[Result], object]
#: A callback for the code's exception.
ErrorHandler = Callable[[ExecutionError], object]
#: A context: its id, or the CodeContext.
ContextRef = Union[str, CodeContext]


class CodeMethods:
    """The code interpreter's methods of `Sandbox` (a base class of it): `run_code` and the
    contexts. Needs the sandbox's `_client` and `_path`."""

    _client: Client

    @property
    def _path(self) -> str:
        raise NotImplementedError

    def run_code(self, code: str, language: Optional[str] = None,
                 context: Optional[ContextRef] = None, *,
                 on_stdout: Optional[OutputHandler] = None,
                 on_stderr: Optional[OutputHandler] = None,
                 on_result: Optional[ResultHandler] = None,
                 on_error: Optional[ErrorHandler] = None,
                 timeout: Optional[Duration] = _DEFAULT_TIMEOUT,
                 figure_formats: Optional[Iterable[str]] = None) -> Execution:
        """Run code in a context's kernel, like a notebook cell: its variables, imports and
        working directory persist for the next call in that context.

        Args:
            code: the code (UTF-8 text of at most 128 KiB, no NUL).
            language: "python" or "bash" (default the context's, else "python").
            context: a context id or CodeContext (default "default" for python, "bash" for
                bash; a context id is created on first use).
            on_stdout: called with each chunk of standard output as the code prints it.
            on_stderr: the same for standard error.
            on_result: called with each Result as it comes (a figure when shown, ...).
            on_error: called with the ExecutionError when the code raises.
            timeout: interrupt the code after this long ("2m" or seconds; default 5m, at most
                24h); the context lives on. None leaves it to the daemon (5m).
            figure_formats: the formats of matplotlib figures, e.g. ["png", "svg"] (default
                ["png"]).

        With any callback the answer is streamed and the callbacks are called as its lines come;
        either way the whole Execution is returned at the end.

        Returns:
            The Execution: its results, output, and the code's exception if it raised.

        Raises:
            ConflictError: a call runs in the context already, or the sandbox is not running.
            BadRequestError: empty, too long or NUL-holding code, an unknown language or one
                other than the context's, a bad context id or timeout.
            QuotaError: the sandbox has too many operations or streams open.
            NotFoundError: no such sandbox for this key.
            CpuosError: the daemon failed, cannot be reached, or the stream ended without its
                end line (the sandbox died or broke the protocol).
            TypeError: `code`, `context` or `figure_formats` of the wrong type.
            Exception: whatever a callback raises; the reading stops and the connection closes
                (which interrupts the code).
        """
        if not isinstance(code, str):
            raise TypeError(f"code is a str, not {type(code).__name__}")
        body: dict[str, Any] = {"code": code}
        if language is not None:
            body["language"] = language
        if context is not None:
            body["context"] = _context_id(context)
        if timeout is not None:
            body["timeout"] = duration(timeout)
        if figure_formats is not None:
            if isinstance(figure_formats, (str, bytes)):
                raise TypeError('figure_formats is a list of names, e.g. ["png", "svg"], not one string')
            body["figure_formats"] = list(figure_formats)
        limit = seconds(_DEFAULT_TIMEOUT if timeout is None else timeout)
        http_timeout = None if limit is None else limit + 60
        path = self._path + "/code"
        handlers = _Handlers(on_stdout, on_stderr, on_result, on_error)
        if not handlers.any():
            return Execution.from_json(self._client.request("POST", path, json_body=body,
                                                            timeout=http_timeout) or {})
        body["stream"] = True
        with self._client.open("POST", path, json_body=body, timeout=http_timeout) as resp:
            return _streamed(resp, handlers)

    def create_code_context(self, language: str = "python", cwd: Optional[str] = None,
                            id: Optional[str] = None, user: Optional[str] = None) -> CodeContext:
        """Make a context (a kernel of its own, started now) for `run_code(..., context=ctx)`.

        Args:
            language: "python" or "bash".
            cwd: the kernel's working directory (default /work, or the user's home where there
                is no /work).
            id: its id (1 to 64 of A-Z a-z 0-9 . _ -; default "ctx_" and 8 hex digits).
            user: "user" (the default) or "root".

        Returns:
            The CodeContext.

        Raises:
            ConflictError: the id is taken, or the sandbox is not running.
            BadRequestError: a bad id, language, cwd or user.
            QuotaError: the sandbox has 16 contexts already.
            NotFoundError, CpuosError: as for `run_code`.
        """
        body = {k: v for k, v in (("id", id), ("language", language), ("cwd", cwd),
                                  ("user", user)) if v is not None}
        return CodeContext.from_json(self._client.request("POST", self._path + "/code/contexts",
                                                          json_body=body))

    def list_code_contexts(self) -> List[CodeContext]:
        """The sandbox's contexts (those started so far, the default ones included).

        Raises:
            ConflictError, NotFoundError, CpuosError: as for `run_code`.
        """
        data = self._client.request("GET", self._path + "/code/contexts") or {}
        return [CodeContext.from_json(c) for c in data.get("contexts") or []]

    def restart_code_context(self, context: ContextRef) -> CodeContext:
        """Give a context a new kernel: its state is gone (a call running in it ends as a dead
        kernel's).

        Args:
            context: its id or CodeContext.

        Returns:
            The CodeContext as it is now.

        Raises:
            NotFoundError: no such context (or sandbox).
            ValueError: an empty id.
            ConflictError, CpuosError: as for `run_code`.
        """
        return CodeContext.from_json(self._client.request(
            "POST", f"{self._path}/code/contexts/{_context_segment(context)}/restart"))

    def remove_code_context(self, context: ContextRef) -> None:
        """Kill a context's kernel and forget the context.

        Args:
            context: its id or CodeContext.

        Raises:
            NotFoundError, ValueError, ConflictError, CpuosError: as for `restart_code_context`.
        """
        self._client.request("DELETE", f"{self._path}/code/contexts/{_context_segment(context)}")


@dataclasses.dataclass
class _Handlers:
    stdout: Optional[OutputHandler]
    stderr: Optional[OutputHandler]
    result: Optional[ResultHandler]
    error: Optional[ErrorHandler]

    def any(self) -> bool:
        return any(h is not None for h in (self.stdout, self.stderr, self.result, self.error))


def _streamed(resp: Response, on: _Handlers) -> Execution:
    """The Execution of a streamed answer, calling back per line as they come."""
    if resp.content_type != "application/x-ndjson":
        # A proxy or daemon that ignored "stream" answered the whole execution at once.
        execution = Execution.from_json(resp.json() or {})
        for text in execution.logs.stdout:
            if on.stdout is not None:
                on.stdout(text)
        for text in execution.logs.stderr:
            if on.stderr is not None:
                on.stderr(text)
        for result in execution.results:
            if on.result is not None:
                on.result(result)
        if execution.error is not None and on.error is not None:
            on.error(execution.error)
        return execution
    execution = Execution()
    out, err = Tail(), Tail()
    for event in events(resp, "run_code"):
        kind = event.get("type")
        if kind in ("stdout", "stderr"):
            text = str(event.get("data") or "")
            if not text:
                continue
            (out if kind == "stdout" else err).add(text)
            callback = on.stdout if kind == "stdout" else on.stderr
            if callback is not None:
                callback(text)
        elif kind == "result":
            result = Result.from_json(event)
            execution.results.append(result)
            if on.result is not None:
                on.result(result)
        elif kind == "error":
            execution.error = ExecutionError.from_json(event)
            if on.error is not None:
                on.error(execution.error)
        elif kind == "end":
            resp.drain()  # the end of the chunked body, so the connection can be reused
            execution.logs = Logs(stdout=out.chunks(), stderr=err.chunks())
            execution.stdout_truncated, execution.stderr_truncated = out.truncated, err.truncated
            execution._end(event)
            return execution
        # Other types are for later daemons: skip them.
    raise CpuosError("the run_code output stream ended without its end line "
                     "(the sandbox died or broke the protocol)")


def _decode_base64(value: Any, what: str) -> bytes:
    """The bytes of a base64 string (line breaks allowed), checked strictly."""
    if not isinstance(value, str):
        raise CpuosError(f"a result's {what} is a {type(value).__name__}, not base64 text")
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError) as e:
        raise CpuosError(f"a result's {what} is not valid base64 ({e}): {value[:40]!r}") from e


def _context_id(context: ContextRef) -> str:
    if isinstance(context, CodeContext):
        return context.id
    if not isinstance(context, str):
        raise TypeError(f"a context is an id or a CodeContext, not {type(context).__name__}")
    return context


def _context_segment(context: ContextRef) -> str:
    return path_segment(_context_id(context), "a context id")
