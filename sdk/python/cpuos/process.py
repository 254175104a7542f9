"""Command results, background processes and the NDJSON output stream they share."""

from __future__ import annotations

import collections
import dataclasses
import json
import signal as _signal
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Union

from ._client import Duration, Response, duration_query, seconds
from .errors import CpuosError, NotFoundError, TimeoutError

if TYPE_CHECKING:
    from .sandbox import Sandbox

OUTPUT_TAIL = 1 << 20  # characters of each stream an ExecResult keeps, like the daemon's buffer


@dataclasses.dataclass
class ExecResult:
    """The result of a command. `exit_code` is None when a signal or the timeout ended it.

    Attributes:
        exit_code: the exit status, or None.
        stdout: the output (its last 1 MiB when `stdout_truncated`).
        stderr: the error output (its last 1 MiB when `stderr_truncated`).
        signal: the number of the signal that ended it, or None.
        timed_out: whether the command's `timeout` killed it.
        stdout_truncated: whether `stdout` lost its beginning.
        stderr_truncated: whether `stderr` lost its beginning.
        duration_ms: how long it ran, if the daemon said.
    """

    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    signal: Optional[int] = None
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[int] = None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ExecResult:
        """The result in an API answer; unknown fields and nulls are ignored.

        Args:
            d: the decoded JSON object.

        Returns:
            The ExecResult.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields and v is not None})

    @property
    def ok(self) -> bool:
        """Whether the command exited with status 0."""
        return self.exit_code == 0


def events(resp: Response, what: str) -> Iterator[dict[str, Any]]:
    """The JSON objects of an NDJSON output stream, one per non-empty line.

    Args:
        resp: the streaming answer.
        what: what the stream belongs to, for error messages.

    Raises:
        CpuosError: a line is not a JSON object, or the connection broke.
        TimeoutError: the daemon stopped sending.
    """
    for line in resp:
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except ValueError as e:
            raise CpuosError(f"the output stream of {what} sent invalid JSON: {line[:200]!r}") from e
        if not isinstance(event, dict):
            raise CpuosError(f"the output stream of {what} sent {line[:200]!r}, not an object")
        yield event


class Tail:
    """The last `cap` characters of a stream of text chunks, kept as the chunks they came in."""

    def __init__(self, cap: int = OUTPUT_TAIL) -> None:
        self.cap = cap
        self.truncated = False
        self._chunks: collections.deque[str] = collections.deque()
        self._size = 0

    def add(self, text: str) -> None:
        """Append a chunk, dropping the oldest text once there is twice `cap` of it."""
        self._chunks.append(text)
        self._size += len(text)
        if self._size > 2 * self.cap:
            self._trim()

    def _trim(self) -> None:
        while self._size - len(self._chunks[0]) >= self.cap:
            self._size -= len(self._chunks.popleft())
        if self._size > self.cap:
            self._chunks[0] = self._chunks[0][self._size - self.cap:]
            self._size = self.cap
        self.truncated = True

    def chunks(self) -> list[str]:
        """The kept chunks: all of them, or those of the last `cap` characters (the first one
        cut; then `truncated` is set)."""
        if self._size > self.cap:
            self._trim()
        return list(self._chunks)

    def text(self) -> str:
        """The kept text: everything, or its last `cap` characters (then `truncated` is set)."""
        return "".join(self.chunks())


class Process:
    """A background process in a sandbox, from `Sandbox.exec(..., background=True)`.

    Attributes:
        pid: the process id in the API.
        os_pid: the process id inside the VM.
        cmd: the command line.
        state: "running" or "exited".
        exit_code, signal_number, timed_out: how it ended, once it has.
    """

    def __init__(self, sandbox: Sandbox, data: Mapping[str, Any]) -> None:
        self._sandbox = sandbox
        self._client = sandbox.client
        self._update(data)

    def _update(self, data: Mapping[str, Any]) -> None:
        self.data = dict(data)
        self.pid: Optional[int] = data.get("pid")
        self.os_pid: Optional[int] = data.get("os_pid")
        self.cmd: Optional[str] = data.get("cmd")
        self.state: Optional[str] = data.get("state")
        self.exit_code: Optional[int] = data.get("exit_code")
        self.signal_number: Optional[int] = data.get("signal")
        self.timed_out = bool(data.get("timed_out"))

    def __repr__(self) -> str:
        return f"<Process pid={self.pid} state={self.state} cmd={self.cmd!r}>"

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self._sandbox.id}/processes/{self.pid}"

    def info(self) -> Process:
        """Refresh this process's fields from the daemon.

        Returns:
            self.

        Raises:
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the daemon failed or cannot be reached.
        """
        self._update(self._client.request("GET", self._path))
        return self

    def stream(self) -> Iterator[tuple[str, str]]:
        """Yield ("stdout" | "stderr", text) as the process writes; sets exit_code at the end.

        Replays the output buffered so far (the last 1 MiB per stream), then follows live output.
        Stopping early closes the connection; reading to the end lets the Client reuse it.

        Raises:
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the stream broke or sent something that is not NDJSON.
        """
        with self._client.open("GET", self._path + "/stream", timeout=None) as resp:
            for event in events(resp, f"process {self.pid}"):
                kind = event.get("type")
                if kind in ("stdout", "stderr"):
                    yield str(kind), str(event.get("data") or "")
                elif kind == "exit":
                    self._update(dict(self.data, state="exited", exit_code=event.get("exit_code"),
                                      signal=event.get("signal"),
                                      timed_out=event.get("timed_out", False)))
                    resp.drain()  # the end of the chunked body, so the connection can be reused
                    return
        # A connection cut mid-stream (a proxy or API replica gone) reads as a clean end.
        raise CpuosError(f"the output stream of process {self.pid} ended without an exit line "
                         "(the connection was cut); the process may still run")

    def output(self) -> ExecResult:
        """Read the whole stream.

        Returns:
            An ExecResult with everything the stream gave.

        Raises:
            NotFoundError, CpuosError: as `stream`.
        """
        out, err = Tail(), Tail()
        for kind, text in self.stream():
            (out if kind == "stdout" else err).add(text)
        return ExecResult(exit_code=self.exit_code, stdout=out.text(), stderr=err.text(),
                          signal=self.signal_number, timed_out=self.timed_out,
                          stdout_truncated=out.truncated, stderr_truncated=err.truncated)

    def wait(self, timeout: Optional[Duration] = None) -> ExecResult:
        """Wait for the process to exit.

        Args:
            timeout: how long to wait ("30s" or seconds); None waits as long as it runs.

        Returns:
            Its ExecResult, with its buffered output.

        Raises:
            TimeoutError: it is still running after `timeout`.
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the daemon failed or cannot be reached.
        """
        limit = seconds(timeout)
        data = self._client.request(
            "POST", self._path + "/wait", query={"timeout": duration_query(timeout)},
            timeout=None if timeout is None else (limit or 0) + 60)
        self._update(data)
        if self.state == "running":
            raise TimeoutError(f"process {self.pid} still running after {duration_query(timeout)}")
        try:
            return self.output()
        except NotFoundError:
            return ExecResult(exit_code=self.exit_code, signal=self.signal_number,
                              timed_out=self.timed_out)

    def kill(self) -> None:
        """SIGKILL the process and everything it started.

        Raises:
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the daemon failed or cannot be reached.
        """
        self._client.request("DELETE", self._path)

    def signal(self, sig: Union[int, str, _signal.Signals]) -> None:
        """Send a signal to the process's group.

        Args:
            sig: a number, a name like "SIGTERM", or a signal.Signals.

        Raises:
            BadRequestError: the daemon does not know the signal.
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the daemon failed or cannot be reached.
        """
        if isinstance(sig, _signal.Signals):
            sig = int(sig)
        self._client.request("POST", self._path + "/signal", json_body={"signal": sig})

    def send_stdin(self, data: Union[bytes, bytearray, memoryview, str], eof: bool = False) -> None:
        """Write to the process's stdin.

        Args:
            data: bytes, or text sent as UTF-8.
            eof: close stdin after the data.

        Raises:
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the daemon failed or cannot be reached.
        """
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._client.request("POST", self._path + "/stdin", body=bytes(data),
                             query={"eof": True} if eof else None)

    def close_stdin(self) -> None:
        """Close the process's stdin.

        Raises:
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the daemon failed or cannot be reached.
        """
        self._client.request("POST", self._path + "/stdin", body=b"", query={"eof": True})
