"""Terminals: processes on a pseudo-terminal, as `sbx.pty` (shaped after E2B's `sandbox.pty`)."""

from __future__ import annotations

import base64
import dataclasses
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from ._client import Duration, duration, seconds
from .errors import CpuosError, NotFoundError, TimeoutError
from .process import ExecResult, Process, events

if TYPE_CHECKING:
    from .sandbox import Sandbox

# A login shell: bash where the image has it, else sh (as `cpuos shell`).
DEFAULT_SHELL = "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi"


@dataclasses.dataclass
class PtySize:
    """A terminal's size in character cells."""

    rows: int = 24
    cols: int = 80

    def json(self) -> dict[str, int]:
        return {"rows": self.rows, "cols": self.cols}


class PtyHandle(Process):
    """A process on a terminal. Its output is bytes, as a terminal emulator takes them.

    With `on_data`, a thread reads the output and calls it with each chunk; `wait()` joins it.
    Without, read `stream_bytes()` yourself.
    """

    def __init__(self, sandbox: Sandbox, data: Mapping[str, Any],
                 on_data: Optional[Callable[[bytes], None]] = None) -> None:
        super().__init__(sandbox, data)
        self._reader: Optional[threading.Thread] = None
        self._error: Optional[BaseException] = None
        if on_data is not None:
            self._reader = threading.Thread(target=self._pump, args=(on_data,), daemon=True,
                                            name=f"cpuos-pty-{self.pid}")
            self._reader.start()

    def _pump(self, on_data: Callable[[bytes], None]) -> None:
        try:
            for chunk in self.stream_bytes():
                on_data(chunk)
        except BaseException as e:  # reported by wait()
            self._error = e

    def stream_bytes(self) -> Iterator[bytes]:
        """Yield the terminal's output as it comes; sets exit_code when the process exits.

        Replays what the daemon kept (the last 1 MiB) first, so a handle made again after a
        pause and resume, or from another program, sees the screen's recent bytes.

        Raises:
            NotFoundError: the process (or its sandbox) is gone.
            CpuosError: the stream broke or sent something that is not NDJSON.
        """
        with self._client.open("GET", self._path + "/stream", timeout=None) as resp:
            for event in events(resp, f"process {self.pid}"):
                kind = event.get("type")
                if kind == "pty":
                    try:
                        yield base64.b64decode(str(event.get("data_base64") or ""), validate=True)
                    except ValueError as e:
                        raise CpuosError(f"the terminal of process {self.pid} sent bad base64") from e
                elif kind == "exit":
                    self._update(dict(self.data, state="exited", exit_code=event.get("exit_code"),
                                      signal=event.get("signal"),
                                      timed_out=event.get("timed_out", False)))
                    resp.drain()
                    return
        raise CpuosError(f"the terminal stream of process {self.pid} ended without an exit line "
                         "(the connection was cut); the process may still run")

    def wait(self, timeout: Optional[Duration] = None,
             on_pty: Optional[Callable[[bytes], None]] = None) -> ExecResult:
        """Wait for the process to exit, passing its output to `on_pty` (or to the `on_data`
        given at create, whose thread this joins).

        Args:
            timeout: with a reader thread, how long to wait for it ("30s" or seconds).
            on_pty: called with each chunk of output, when no `on_data` was given.

        Returns:
            An ExecResult with the exit status (the output went to the callbacks).

        Raises:
            TimeoutError: the process still runs after `timeout`.
            CpuosError: the stream broke.
        """
        if self._reader is not None:
            self._reader.join(None if timeout is None else seconds(timeout))
            if self._reader.is_alive():
                raise TimeoutError(f"process {self.pid} still running after {timeout}")
            if self._error is not None:
                raise self._error
        else:
            for chunk in self.stream_bytes():
                if on_pty is not None:
                    on_pty(chunk)
        return ExecResult(exit_code=self.exit_code, signal=self.signal_number,
                          timed_out=self.timed_out)

    def resize(self, size: PtySize) -> None:
        """Give the terminal a new size; the process gets SIGWINCH.

        Raises:
            NotFoundError: the process has exited.
            CpuosError: the daemon failed or cannot be reached.
        """
        self._client.request("POST", self._path + "/resize", json_body=size.json())


class Pty:
    """`sbx.pty`: start, reach and end processes on terminals."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    def create(self, size: PtySize = PtySize(), on_data: Optional[Callable[[bytes], None]] = None,
               *, cmd: Union[str, Sequence[str], None] = None, cwd: Optional[str] = None,
               envs: Optional[Mapping[str, str]] = None, user: Optional[str] = None,
               timeout: Optional[Duration] = None) -> PtyHandle:
        """Start a process on a new terminal: a login shell, or `cmd`.

        Args:
            size: the terminal's size.
            on_data: called from a thread with each chunk of output (bytes).
            cmd: a shell command, or argv; default a login shell (bash, else sh).
            cwd, envs, user: as for `exec` (user default "user").
            timeout: kill it after this long (default: it runs until it exits or is killed).

        Returns:
            The PtyHandle; its `pid` names it to the other calls.

        Raises:
            BadRequestError: a bad size or argument.
            CpuosError: the daemon failed or cannot be reached.
        """
        body: dict[str, Any] = {"background": True, "pty": size.json()}
        if cmd is None:
            body["cmd"] = DEFAULT_SHELL
        elif isinstance(cmd, str):
            body["cmd"] = cmd
        else:
            body["argv"] = list(cmd)
        if cwd is not None:
            body["cwd"] = cwd
        if envs:
            body["env"] = dict(envs)
        if user is not None:
            body["user"] = user
        if timeout is not None:
            body["timeout"] = duration(timeout)
        data = self._sandbox.client.request("POST", f"/v1/sandboxes/{self._sandbox.id}/exec",
                                            json_body=body)
        return PtyHandle(self._sandbox, data, on_data)

    def connect(self, pid: int, on_data: Optional[Callable[[bytes], None]] = None) -> PtyHandle:
        """A handle on a running terminal process (after a pause and resume, or from elsewhere).

        Raises:
            NotFoundError: no such process.
        """
        data = self._sandbox.client.request("GET", f"/v1/sandboxes/{self._sandbox.id}/processes/{pid}")
        return PtyHandle(self._sandbox, data, on_data)

    def send_stdin(self, pid: int, data: Union[bytes, str]) -> None:
        """Type `data` into the terminal of process `pid` (text as UTF-8)."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._sandbox.client.request("POST", f"/v1/sandboxes/{self._sandbox.id}/processes/{pid}/stdin",
                                     body=bytes(data))

    def resize(self, pid: int, size: PtySize) -> None:
        """Give the terminal of process `pid` a new size; it gets SIGWINCH."""
        self._sandbox.client.request("POST", f"/v1/sandboxes/{self._sandbox.id}/processes/{pid}/resize",
                                     json_body=size.json())

    def kill(self, pid: int) -> bool:
        """SIGKILL process `pid` and what it started: True, or False when it was gone already."""
        try:
            self._sandbox.client.request("DELETE", f"/v1/sandboxes/{self._sandbox.id}/processes/{pid}")
        except NotFoundError:
            return False
        return True
