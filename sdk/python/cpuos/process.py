"""Command results and background processes."""

import dataclasses
import json
import http.client
import signal as _signal
from typing import Optional

from ._client import duration_query, seconds
from .errors import CpuosError, NotFoundError, TimeoutError


@dataclasses.dataclass
class ExecResult:
    """The result of a command. `exit_code` is None when a signal or the timeout ended it."""

    exit_code: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    signal: Optional[int] = None
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    duration_ms: Optional[int] = None

    @classmethod
    def from_json(cls, d):
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields and v is not None})

    @property
    def ok(self):
        return self.exit_code == 0


class Process:
    """A background process in a sandbox."""

    def __init__(self, sandbox, data):
        self._sandbox = sandbox
        self._client = sandbox._client
        self._update(data)

    def _update(self, data):
        self.data = data
        self.pid = data.get("pid")
        self.os_pid = data.get("os_pid")
        self.cmd = data.get("cmd")
        self.state = data.get("state")
        self.exit_code = data.get("exit_code")
        self.signal_number = data.get("signal")
        self.timed_out = bool(data.get("timed_out"))

    def __repr__(self):
        return f"<Process pid={self.pid} state={self.state} cmd={self.cmd!r}>"

    @property
    def _path(self):
        return f"/v1/sandboxes/{self._sandbox.id}/processes/{self.pid}"

    def info(self):
        """Refresh and return this process."""
        self._update(self._client.request("GET", self._path))
        return self

    def stream(self):
        """Yield ("stdout" | "stderr", text) as the process writes; sets exit_code at the end.

        Replays the output buffered so far (the last 1 MiB per stream), then follows live output."""
        conn, resp = self._client.open("GET", self._path + "/stream", timeout=None)
        try:
            for line in resp:
                line = line.strip()
                if not line:
                    continue
                event = json.loads(line)
                kind = event.get("type")
                if kind in ("stdout", "stderr"):
                    yield kind, event.get("data", "")
                elif kind == "exit":
                    self._update(dict(self.data, state="exited", exit_code=event.get("exit_code"),
                                      signal=event.get("signal"),
                                      timed_out=event.get("timed_out", False)))
                    return
        except (OSError, http.client.HTTPException) as e:
            raise CpuosError(f"the output stream of process {self.pid} broke: {e}") from e
        finally:
            conn.close()

    def output(self):
        """Read the whole stream; return an ExecResult with everything it gave."""
        out, err = [], []
        for kind, text in self.stream():
            (out if kind == "stdout" else err).append(text)
        return ExecResult(exit_code=self.exit_code, stdout="".join(out), stderr="".join(err),
                          signal=self.signal_number, timed_out=self.timed_out)

    def wait(self, timeout=None):
        """Wait for the process to exit and return its ExecResult (with its buffered output).

        Raises cpuos.TimeoutError if it is still running after `timeout`."""
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

    def kill(self):
        """SIGKILL the process and everything it started."""
        self._client.request("DELETE", self._path)

    def signal(self, sig):
        """Send a signal (number, name like "SIGTERM", or signal.Signals) to its process group."""
        if isinstance(sig, _signal.Signals):
            sig = int(sig)
        self._client.request("POST", self._path + "/signal", json_body={"signal": sig})

    def send_stdin(self, data, eof=False):
        """Write bytes (or UTF-8 text) to the process's stdin; `eof=True` closes it afterwards."""
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._client.request("POST", self._path + "/stdin", body=bytes(data),
                             query={"eof": True} if eof else None)

    def close_stdin(self):
        """Close the process's stdin."""
        self._client.request("POST", self._path + "/stdin", body=b"", query={"eof": True})
