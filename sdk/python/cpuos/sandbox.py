"""Sandboxes: create, connect, list, exec, kill."""

from __future__ import annotations

import base64
import collections
from types import TracebackType
from typing import (Any, Callable, Iterator, List, Literal, Mapping, Optional, Sequence, Union,
                    overload)

from ._client import (DEFAULT_TIMEOUT, Client, Duration, Response, duration, seconds,
                      shared_client)
from .errors import CpuosError, TimeoutError
from .files import Files
from .process import ExecResult, Process, Tail, events

_CREATE_TIMEOUT = 600.0  # a cold boot under TCG can take a while

#: A command: a string for /bin/sh -c, or an argv list.
Command = Union[str, Sequence[str]]
#: Standard input for a command: text, or bytes sent exactly.
Stdin = Union[str, bytes, bytearray, memoryview]
#: A callback for output chunks as a command produces them.
OutputCallback = Callable[[str], object]


class Sandbox:
    """A cpuos sandbox (a microVM). Use `Sandbox.create`, `Sandbox.connect` or `Sandbox.list`.

    `Sandbox(id, api_key=..., api_url=...)` makes a handle without asking the daemon. As a context
    manager it kills the sandbox at the end of the block.

    Args:
        sandbox_id: the sandbox's id, e.g. "sbx_3f9a0c1d2e4b5a69".
        api_key, api_url: as for `Client` (default $CPUOS_API_KEY and $CPUOS_API_URL).
        request_timeout: seconds of socket inactivity before a call gives up.

    Attributes:
        id, template, state, vcpus, memory_mb, disk_mb, created_at, expires_at, metadata,
        end_reason: the sandbox's fields as last read from the daemon (see `info`).
        files: the sandbox's Files.

    Raises:
        ValueError: no id, or a bad API URL.
    """

    def __init__(self, sandbox_id: Optional[str] = None, *, api_key: Optional[str] = None,
                 api_url: Optional[str] = None, request_timeout: Optional[float] = DEFAULT_TIMEOUT,
                 _data: Optional[Mapping[str, Any]] = None, _client: Optional[Client] = None) -> None:
        self._client = _client or shared_client(api_key, api_url, request_timeout)
        self._update(_data or {"id": sandbox_id})
        if not self.id:
            raise ValueError("a sandbox id is required")
        self.files = Files(self)

    def _update(self, data: Mapping[str, Any]) -> None:
        self.data = dict(data)
        self.id: str = data.get("id") or ""
        self.template: Optional[str] = data.get("template")
        self.state: Optional[str] = data.get("state")
        self.vcpus: Optional[int] = data.get("vcpus")
        self.memory_mb: Optional[int] = data.get("memory_mb")
        self.disk_mb: Optional[int] = data.get("disk_mb")
        self.created_at: Optional[str] = data.get("created_at")
        self.expires_at: Optional[str] = data.get("expires_at")
        self.metadata: dict[str, str] = data.get("metadata") or {}
        self.end_reason: Optional[str] = data.get("end_reason")

    def __repr__(self) -> str:
        return f"<Sandbox {self.id} template={self.template} state={self.state}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> Literal[False]:
        self.kill()
        return False

    @property
    def client(self) -> Client:
        """The Client this sandbox talks through, shared by every handle with the same daemon,
        key and request timeout. Its `pool_stats()` tells how many connections were opened and
        reused."""
        return self._client

    @property
    def _path(self) -> str:
        return f"/v1/sandboxes/{self.id}"

    @classmethod
    def create(cls, template: str = "python", timeout: Optional[Duration] = None,
               vcpus: Optional[int] = None, memory_mb: Optional[int] = None,
               disk_mb: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
               metadata: Optional[Mapping[str, str]] = None, *, api_key: Optional[str] = None,
               api_url: Optional[str] = None,
               request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Sandbox:
        """Start a sandbox and return it once it is ready.

        Args:
            template: the template to boot, e.g. "python" or "base".
            timeout: when the daemon kills it ("30m" or seconds; default 5m, at most 24h).
            vcpus: virtual CPUs (1..16, default 1).
            memory_mb: memory (128..65536, default 512).
            disk_mb: the writable disk (64..1048576, default 2048).
            env: environment variables for every command in it.
            metadata: string pairs to find it by with `list`.
            api_key, api_url: as for `Client`.
            request_timeout: seconds of socket inactivity before a call gives up (the boot
                itself may take up to 10 minutes).

        Returns:
            The running Sandbox.

        Raises:
            BadRequestError: an unknown template or a value out of range.
            AuthenticationError: a missing or wrong key.
            QuotaError: the account runs as many sandboxes as it may.
            SandboxError: the VM failed to start.
            CpuosError: the daemon cannot be reached.
        """
        client = shared_client(api_key, api_url, request_timeout)
        body: dict[str, Any] = {"template": template}
        for key, value in (("timeout", duration(timeout)), ("vcpus", vcpus), ("memory_mb", memory_mb),
                           ("disk_mb", disk_mb), ("env", env), ("metadata", metadata)):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        data = client.request("POST", "/v1/sandboxes", json_body=body,
                              timeout=max(_CREATE_TIMEOUT, request_timeout or 0))
        return cls(_data=data, _client=client)

    @classmethod
    def connect(cls, sandbox_id: str, *, api_key: Optional[str] = None,
                api_url: Optional[str] = None,
                request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Sandbox:
        """The existing sandbox `sandbox_id`, its fields read from the daemon.

        Args:
            sandbox_id: the sandbox's id.
            api_key, api_url, request_timeout: as for `create`.

        Returns:
            The Sandbox (in any state: check `.state`).

        Raises:
            NotFoundError: no such sandbox for this key (another account's too).
            AuthenticationError: a missing or wrong key.
            CpuosError: the daemon cannot be reached.
        """
        return cls(sandbox_id, api_key=api_key, api_url=api_url, request_timeout=request_timeout).info()

    @classmethod
    def list(cls, state: Optional[str] = None, metadata: Optional[Mapping[str, str]] = None, *,
             page_size: Optional[int] = None, api_key: Optional[str] = None,
             api_url: Optional[str] = None,
             request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> SandboxPaginator:
        """Every sandbox this key can see, newest first, as a lazy iterator over the pages.

        The first page is fetched now, so that a wrong key or filter raises here; each further
        page only when iteration reaches it. Use `list(Sandbox.list(...))` for a list.

        Args:
            state: only those in this state ("running", "stopped" or "lost").
            metadata: only those with all of these metadata pairs.
            page_size: sandboxes per request (1..100, default 50).
            api_key, api_url, request_timeout: as for `create`.

        Returns:
            A SandboxPaginator of Sandbox (its `pages()` yields them a page at a time).

        Raises:
            AuthenticationError: a missing or wrong key.
            BadRequestError: a bad state or page size.
            CpuosError: the daemon cannot be reached (also while iterating, for later pages).
        """
        client = shared_client(api_key, api_url, request_timeout)
        query: dict[str, Any] = {"state": state, "limit": page_size}
        for k, v in (metadata or {}).items():
            query[f"metadata.{k}"] = v
        return SandboxPaginator(client, query)

    def info(self) -> Sandbox:
        """Refresh this sandbox's fields from the daemon.

        Returns:
            self.

        Raises:
            NotFoundError: no such sandbox for this key.
            CpuosError: the daemon failed or cannot be reached.
        """
        self._update(self._client.request("GET", self._path))
        return self

    def is_running(self) -> bool:
        """Refresh the fields and tell whether the sandbox is running.

        Raises:
            NotFoundError, CpuosError: as for `info`.
        """
        return self.info().state == "running"

    def set_timeout(self, timeout: Duration) -> Sandbox:
        """Make the sandbox expire `timeout` from now.

        Args:
            timeout: "1h", "30m" or seconds (at most 24h).

        Returns:
            self, with the new `expires_at`.

        Raises:
            ConflictError: the sandbox is not running.
            BadRequestError: `timeout` is invalid or out of range.
            NotFoundError, CpuosError: as for `info`.
        """
        self._update(self._client.request("POST", self._path + "/timeout",
                                          json_body={"timeout": duration(timeout)}))
        return self

    def kill(self) -> None:
        """Stop the sandbox (fine if it already stopped).

        Raises:
            NotFoundError, CpuosError: as for `info`.
        """
        self._client.request("DELETE", self._path)
        self.state = "stopped" if self.state == "running" else self.state

    @overload
    def exec(self, cmd: Command, timeout: Optional[Duration] = ...,
             env: Optional[Mapping[str, str]] = ..., cwd: Optional[str] = ...,
             user: Optional[str] = ..., stdin: Optional[Stdin] = ...,
             background: Literal[False] = ..., *, on_stdout: Optional[OutputCallback] = ...,
             on_stderr: Optional[OutputCallback] = ...) -> ExecResult: ...

    @overload
    def exec(self, cmd: Command, timeout: Optional[Duration] = ...,
             env: Optional[Mapping[str, str]] = ..., cwd: Optional[str] = ...,
             user: Optional[str] = ..., stdin: Optional[Stdin] = ..., *,
             background: Literal[True]) -> Process: ...

    @overload
    def exec(self, cmd: Command, timeout: Optional[Duration], env: Optional[Mapping[str, str]],
             cwd: Optional[str], user: Optional[str], stdin: Optional[Stdin],
             background: Literal[True]) -> Process: ...

    @overload
    def exec(self, cmd: Command, timeout: Optional[Duration] = ...,
             env: Optional[Mapping[str, str]] = ..., cwd: Optional[str] = ...,
             user: Optional[str] = ..., stdin: Optional[Stdin] = ..., background: bool = ..., *,
             on_stdout: Optional[OutputCallback] = ...,
             on_stderr: Optional[OutputCallback] = ...) -> Union[ExecResult, Process]: ...

    def exec(self, cmd: Command, timeout: Optional[Duration] = None,
             env: Optional[Mapping[str, str]] = None, cwd: Optional[str] = None,
             user: Optional[str] = None, stdin: Optional[Stdin] = None, background: bool = False,
             *, on_stdout: Optional[OutputCallback] = None,
             on_stderr: Optional[OutputCallback] = None) -> Union[ExecResult, Process]:
        """Run a command in the sandbox.

        Args:
            cmd: a string run by /bin/sh -c, or an argv list.
            timeout: kill the command after this long ("2m" or seconds; default none).
            env: environment variables for it (over the sandbox's).
            cwd: its working directory.
            user: "user" (the default) or "root".
            stdin: its standard input, then closed: text (sent as UTF-8), or bytes sent exactly.
            background: start it and return a Process at once instead of waiting.
            on_stdout: called with each chunk of standard output as the command writes it
                (foreground only). Without callbacks the output arrives all at once at the end.
            on_stderr: the same for standard error.

        Returns:
            The ExecResult once it ended (the last 1 MiB of each stream), or a Process with
            `background=True`.

        Raises:
            TimeoutError: `timeout` killed the command; the partial result is in `.result`.
            ConflictError: the sandbox is not running.
            BadRequestError: an invalid command, env, cwd, user or timeout.
            NotFoundError: no such sandbox for this key.
            CpuosError: the daemon failed, cannot be reached, or broke the output stream.
            ValueError: callbacks with `background=True` (use `Process.stream`).
            Exception: whatever a callback raises; the reading stops and the connection closes.
        """
        body: dict[str, Any] = ({"argv": [str(a) for a in cmd]} if isinstance(cmd, (list, tuple))
                                else {"cmd": cmd})
        if isinstance(stdin, str):
            body["stdin"] = stdin
        elif stdin is not None:
            # JSON carries only text: bytes travel as base64 so that NUL, 0xff and invalid UTF-8
            # arrive exactly.
            body["stdin_base64"] = base64.b64encode(bytes(stdin)).decode("ascii")
        for key, value in (("timeout", duration(timeout)), ("env", env), ("cwd", cwd), ("user", user)):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        if background:
            if on_stdout is not None or on_stderr is not None:
                raise ValueError("on_stdout/on_stderr are for foreground commands: "
                                 "read a background one with Process.stream()")
            body["background"] = True
            return Process(self, self._client.request("POST", self._path + "/exec", json_body=body))
        limit = seconds(timeout)
        http_timeout = None if timeout is None else (limit or 0) + 60
        if on_stdout is None and on_stderr is None:
            result = ExecResult.from_json(self._client.request(
                "POST", self._path + "/exec", json_body=body, timeout=http_timeout))
        else:
            body["stream"] = True
            with self._client.open("POST", self._path + "/exec", json_body=body,
                                   timeout=http_timeout) as resp:
                result = _streamed_result(resp, on_stdout, on_stderr)
        if result.timed_out:
            raise TimeoutError(f"command timed out after {_show(timeout)}: {cmd!r}", result=result)
        return result

    def processes(self) -> List[Process]:
        """The sandbox's background processes.

        Raises:
            NotFoundError, ConflictError, CpuosError: as for `exec`.
        """
        data = self._client.request("GET", self._path + "/processes")
        return [Process(self, p) for p in data.get("processes", [])]

    def process(self, pid: int) -> Process:
        """The background process `pid`.

        Raises:
            NotFoundError: no such process (or sandbox).
            CpuosError: the daemon failed or cannot be reached.
        """
        return Process(self, self._client.request("GET", f"{self._path}/processes/{pid}"))


class SandboxPaginator:
    """The sandboxes of `Sandbox.list`, newest first, one page per request.

    An iterator: each page is fetched when iteration reaches it (the first one by `Sandbox.list`
    itself), so stopping early saves the requests for the rest. Iterate it once.

    Attributes:
        pages_fetched: how many pages have been requested so far.
    """

    def __init__(self, client: Client, query: Mapping[str, Any]) -> None:
        self._client = client
        self._query = dict(query)
        self._cursor: Optional[str] = None
        self._more = True
        self._buffer: collections.deque[Sandbox] = collections.deque()
        self.pages_fetched = 0
        self._buffer.extend(self._fetch())

    def _fetch(self) -> list[Sandbox]:
        page = self._client.request("GET", "/v1/sandboxes",
                                    query=dict(self._query, cursor=self._cursor)) or {}
        self.pages_fetched += 1
        self._cursor = page.get("next_cursor") or None
        self._more = self._cursor is not None
        return [Sandbox(_data=d, _client=self._client) for d in page.get("sandboxes", [])]

    def __iter__(self) -> SandboxPaginator:
        return self

    def __next__(self) -> Sandbox:
        """The next sandbox, fetching the next page when this one is used up.

        Raises:
            StopIteration: after the last page.
            CpuosError: fetching a page failed.
        """
        while not self._buffer:
            if not self._more:
                raise StopIteration
            self._buffer.extend(self._fetch())
        return self._buffer.popleft()

    def pages(self) -> Iterator[list[Sandbox]]:
        """Yield what is left a page at a time (lists of Sandbox), fetching each when reached.

        Raises:
            CpuosError: fetching a page failed.
        """
        if self._buffer:
            page = list(self._buffer)
            self._buffer.clear()
            yield page
        while self._more:
            yield self._fetch()


def _streamed_result(resp: Response, on_stdout: Optional[OutputCallback],
                     on_stderr: Optional[OutputCallback]) -> ExecResult:
    """The result of a foreground exec asked with "stream": true, calling back per chunk."""
    if resp.content_type != "application/x-ndjson":
        # A daemon that predates "stream" ignores it and answers the whole result at once.
        result = ExecResult.from_json(resp.json() or {})
        if on_stdout is not None and result.stdout:
            on_stdout(result.stdout)
        if on_stderr is not None and result.stderr:
            on_stderr(result.stderr)
        return result
    out, err = Tail(), Tail()
    for event in events(resp, "exec"):
        kind = event.get("type")
        if kind in ("stdout", "stderr"):
            text = str(event.get("data") or "")
            (out if kind == "stdout" else err).add(text)
            callback = on_stdout if kind == "stdout" else on_stderr
            if callback is not None and text:
                callback(text)
        elif kind == "exit":
            resp.drain()  # the end of the chunked body, so the connection can be reused
            fields = {k: v for k, v in event.items() if k not in ("type", "stdout", "stderr")}
            result = ExecResult.from_json(fields)
            result.stdout, result.stderr = out.text(), err.text()
            result.stdout_truncated = result.stdout_truncated or out.truncated
            result.stderr_truncated = result.stderr_truncated or err.truncated
            return result
        # Other types are for later daemons: skip them.
    raise CpuosError("the exec output stream ended without an exit line")


def _show(timeout: Optional[Duration]) -> str:
    value = duration(timeout)
    return f"{value}s" if isinstance(value, int) else str(value)
