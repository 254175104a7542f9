"""Sandboxes: create, connect, list, exec, kill; pause, resume, fork and checkpoint; their
network policy; run_code and its contexts (from run_code.CodeMethods)."""

from __future__ import annotations

import base64
import codecs
import collections
from types import TracebackType
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Literal, Mapping, Optional, Protocol,
                    Sequence, TypeVar, Union, overload)

from ._client import (DEFAULT_TIMEOUT, Client, Duration, Response, duration, path_segment,
                      seconds, shared_client)
from .checkpoint import Checkpoint
from .errors import CpuosError, TimeoutError
from .files import Files
from .process import ExecResult, Process, Tail, events
from .pty import Pty
from .run_code import CodeMethods

_CREATE_TIMEOUT = 600.0  # a cold boot under TCG can take a while; so can saving a VM's memory

#: A command: a string for /bin/sh -c, or an argv list.
Command = Union[str, Sequence[str]]
#: Standard input for a command: text, or bytes sent exactly.
Stdin = Union[str, bytes, bytearray, memoryview]
#: A callback for output chunks as a command produces them.
OutputCallback = Callable[[str], object]
#: An egress network policy: "allow-all" or "deny-all", or a dict in the API's spelling,
#: {"mode": "allow-all" | "deny-all" | "custom", "allowedHosts": [...], "allowedCIDRs": [...],
#: "deniedCIDRs": [...]}, whose list keys may also be written allowed_hosts, allowed_cidrs and
#: denied_cidrs.
NetworkPolicy = Union[str, Mapping[str, Any]]

_NETWORK_KEYS = {"allowed_hosts": "allowedHosts", "allowed_cidrs": "allowedCIDRs",
                 "denied_cidrs": "deniedCIDRs"}

_S = TypeVar("_S", bound="Sandbox")
_S_co = TypeVar("_S_co", bound="Sandbox", covariant=True)


class _ResumeSession(Protocol[_S_co]):
    """`Sandbox.resume` on the class: resume a paused sandbox by its session or sandbox id."""

    def __call__(self, session_or_id: str, *, api_key: Optional[str] = ...,
                 api_url: Optional[str] = ...,
                 request_timeout: Optional[float] = ...) -> _S_co: ...


class _ResumeThis(Protocol[_S_co]):
    """`sbx.resume` on an instance: resume this sandbox."""

    def __call__(self) -> _S_co: ...


class _Resume:
    """`resume`, one name for two calls: `Sandbox.resume(session_id)` on the class (a new handle,
    for a program that kept only the session id) and `sbx.resume()` on a handle (that sandbox).

    A descriptor rather than a method because a plain method cannot be both: on the class it
    hands out the classmethod `_resume_session`, on an instance the method `_resume_this`."""

    @overload
    def __get__(self, obj: None, owner: type[_S]) -> _ResumeSession[_S]: ...

    @overload
    def __get__(self, obj: _S, owner: Optional[type[_S]] = None) -> _ResumeThis[_S]: ...

    def __get__(self, obj: Optional[_S], owner: Optional[type[_S]] = None
                ) -> Union[_ResumeSession[_S], _ResumeThis[_S]]:
        if obj is not None:
            return obj._resume_this
        if owner is None:  # the descriptor protocol always passes one of the two
            raise TypeError("resume needs a Sandbox class or instance")
        return owner._resume_session


class Sandbox(CodeMethods):
    """A cpuos sandbox (a microVM). Use `Sandbox.create`, `Sandbox.connect`, `Sandbox.resume` or
    `Sandbox.list`.

    `Sandbox(id, api_key=..., api_url=...)` makes a handle without asking the daemon. As a context
    manager it kills the sandbox at the end of the block. Its code interpreter: `run_code`,
    `create_code_context`, `list_code_contexts`, `restart_code_context`, `remove_code_context`.

    Args:
        sandbox_id: the sandbox's id, e.g. "sbx_3f9a0c1d2e4b5a69".
        api_key, api_url: as for `Client` (default $CPUOS_API_KEY and $CPUOS_API_URL).
        request_timeout: seconds of socket inactivity before a call gives up.

    Attributes:
        id, template, state, vcpus, memory_mb, disk_mb, created_at, expires_at, metadata,
        end_reason, session_id, on_timeout, paused_at, parent, network: the sandbox's fields as
            last read from the daemon (see `info`). `state` is "running", "paused", "stopped" or
            "lost"; `session_id` ("ses_...") names it for `Sandbox.resume`; `parent` is the
            sandbox it was forked from or the checkpoint it was started from; `network` is its
            egress policy as a dict in the API's spelling (the daemon's default when it was
            created without one; None when the daemon runs without networks).
        public, traffic_token: whether its port URLs are open to anyone, and the token they
            need otherwise (see `url`).
        secrets: the names of the secrets it holds placeholders of (see `create`).
        stored: whether its pause is also in the daemon's object store, so it resumes even where
            the host lost its copy (daemons with `--s3-endpoint`; else always False).
        node: the node that owns it where daemons share one database (`cpuosd --node`); None on
            a single host.
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
        self.pty = Pty(self)

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
        self.session_id: Optional[str] = data.get("session_id")
        self.on_timeout: Optional[str] = data.get("on_timeout")
        self.idle_timeout: Optional[int] = data.get("idle_timeout")
        self.paused_at: Optional[str] = data.get("paused_at")
        self.parent: Optional[str] = data.get("parent")
        self.network: Optional[dict[str, Any]] = data.get("network")
        self.public: bool = bool(data.get("public"))
        self.traffic_token: Optional[str] = data.get("traffic_token")
        self.secrets: list[str] = list(data.get("secrets") or [])
        self.stored: bool = data.get("stored") is True
        self.node: Optional[str] = data.get("node")
        self._port_url: Optional[str] = data.get("port_url")

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
    def create(cls, template: Optional[str] = None, timeout: Optional[Duration] = None,
               vcpus: Optional[int] = None, memory_mb: Optional[int] = None,
               disk_mb: Optional[int] = None, env: Optional[Mapping[str, str]] = None,
               metadata: Optional[Mapping[str, str]] = None, *,
               checkpoint: Optional[Union[str, Checkpoint]] = None,
               on_timeout: Optional[str] = None, network: Optional[NetworkPolicy] = None,
               public: Optional[bool] = None, secrets: Optional[Iterable[str]] = None,
               max_processes: Optional[int] = None, idle_timeout: Optional[Duration] = None,
               api_key: Optional[str] = None, api_url: Optional[str] = None,
               request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Sandbox:
        """Start a sandbox and return it once it is ready.

        Args:
            template: the template to boot, e.g. "python" or "base" (default "python", or the
                checkpoint's with `checkpoint`); a template of the account's own (its name or
                id); or an OCI image reference such as "node:22-alpine", which the daemon pulls
                the first time (the call then takes as long as the pull) and reuses after.
            timeout: when its timeout acts ("30m" or seconds; default 5m, at most 24h).
            vcpus: virtual CPUs (1..16, default 1).
            memory_mb: memory (128..65536, default 512).
            disk_mb: the writable disk (64..1048576, default 2048).
            env: environment variables for every command in it.
            metadata: string pairs to find it by with `list`.
            checkpoint: start from this checkpoint (a Checkpoint, its id or its name): its
                memory, disk, running processes and template.
            on_timeout: what its timeout does: "pause" (the daemon's default) or "kill".
            idle_timeout: pause it once it sat idle this long ("5m" or seconds): no call, no
                stream or port connection open, and its CPU under 10%; any later call resumes
                it. Default: never (the absolute `timeout` acts as always).
            network: its egress policy (default the daemon's): "allow-all", "deny-all", or
                e.g. {"mode": "custom", "allowed_hosts": ["pypi.org", "*.pythonhosted.org"],
                "denied_cidrs": ["203.0.113.0/24"]} (see `set_network`).
            public: its port URLs (`url`) open to anyone, without its traffic token
                (default False).
            secrets: names of the account's secrets (`Secret.set`) it gets: each one's
                placeholder in the environment variable of its name, which the egress proxy
                replaces by the value in headers sent to the secret's hosts only.
            max_processes: how many processes everything run in it may have at once
                (16..65536); it only lowers the guest agent's own limit (4096, or less on a
                small guest).
            api_key, api_url: as for `Client`.
            request_timeout: seconds of socket inactivity before a call gives up (the boot
                itself may take up to 10 minutes).

        Returns:
            The running Sandbox.

        Raises:
            BadRequestError: an unknown template, a value out of range, a bad `on_timeout` or
                `network`, a template other than the checkpoint's, an unknown secret or one
                whose name `env` sets too.
            NotFoundError: no such checkpoint in this key's account.
            AuthenticationError: a missing or wrong key.
            QuotaError: the account runs as many sandboxes as it may.
            SandboxError: the VM failed to start.
            CpuosError: the daemon cannot be reached.
            TypeError, ValueError: a `network` as for `set_network`.
        """
        client = shared_client(api_key, api_url, request_timeout)
        body: dict[str, Any] = {}
        if checkpoint is not None:
            body["checkpoint"] = checkpoint.id if isinstance(checkpoint, Checkpoint) else checkpoint
        if template is not None or checkpoint is None:
            body["template"] = template if template is not None else "python"
        for key, value in (("timeout", duration(timeout)), ("vcpus", vcpus), ("memory_mb", memory_mb),
                           ("disk_mb", disk_mb), ("env", env), ("metadata", metadata),
                           ("on_timeout", on_timeout), ("public", public),
                           ("max_processes", max_processes), ("idle_timeout", duration(idle_timeout))):
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        if network is not None:
            body["network"] = _network_policy(network)
        if secrets is not None:
            if isinstance(secrets, str):
                raise TypeError("secrets is a list of names, not one string")
            body["secrets"] = list(secrets)
        data = client.request("POST", "/v1/sandboxes", json_body=body,
                              timeout=_slow_timeout(client))
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
            state: only those in this state ("running", "paused", "stopped" or "lost").
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

    def url(self, port: int) -> str:
        """The URL at which the daemon serves the sandbox's TCP port (HTTP, streamed responses
        and WebSocket), e.g. for a dev server started with `exec(..., background=True)`. The
        server must listen on 0.0.0.0. Unless the sandbox is public the URL carries its
        traffic token, which a browser's first visit turns into a cookie; other clients may
        send it as the header "cpuos-traffic-token" instead. A request to a paused sandbox
        resumes it.

        Raises:
            ValueError: a port outside 1..65535.
            CpuosError: the daemon serves no port URLs (--url-listen none).
        """
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"port must be an integer from 1 to 65535, not {port!r}")
        if not self._port_url:
            if "port_url" not in self.data:
                self.info()
            if not self._port_url:
                raise CpuosError("this daemon serves no port URLs (it runs with --url-listen none)")
        url = self._port_url.replace("{port}", str(port))
        if not self.public and self.traffic_token:
            url += "?cpuos_token=" + self.traffic_token
        return url

    def get_metrics(self, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Its resource samples, oldest first, one every few seconds while it runs (the daemon
        keeps the last ten minutes; a paused sandbox keeps those it had, and is not resumed).

        Each is a dict: "timestamp" (RFC 3339), "cpu_count", "cpu_used_pct" (of its vCPUs, from
        the host), "mem_used", "mem_total", "disk_used", "disk_total", "net_rx_bytes",
        "net_tx_bytes" (bytes, as the guest counts them; None when it did not answer).

        Args:
            limit: only the newest `limit` samples (1..120).

        Raises:
            NotFoundError: no such sandbox.
        """
        data = self._client.request("GET", self._path + "/metrics", query={"limit": limit}) or {}
        return list(data.get("metrics", []))

    def get_logs(self, tail: Optional[int] = None) -> str:
        """Its console log: what the guest kernel and cpuos's agent wrote (boot, restores, out of
        memory kills, panics), kept 7 days after it stopped; for "why did my sandbox die".

        Args:
            tail: only the last `tail` bytes (default 64 KiB, at most 1 MiB).

        Raises:
            NotFoundError: no such sandbox, or none kept of it.
        """
        with self._client.open("GET", self._path + "/logs", query={"tail": tail}) as resp:
            return resp.read().decode("utf-8", "replace")

    def follow_logs(self, tail: Optional[int] = None) -> Iterator[str]:
        """Its console log's last bytes, then what is written after, as it comes, until it has
        stopped (or the caller stops iterating)."""
        text = codecs.getincrementaldecoder("utf-8")("replace")
        with self._client.open("GET", self._path + "/logs", query={"tail": tail, "follow": True},
                               timeout=None) as resp:
            while True:
                chunk = resp.read1(65536)
                if not chunk:
                    rest = text.decode(b"", final=True)
                    if rest:
                        yield rest
                    return
                yield text.decode(chunk)

    def get_network(self) -> Optional[dict[str, Any]]:
        """Read the sandbox's egress network policy from the daemon (also into `network`).

        Returns:
            The policy as a dict in the API's spelling, e.g. {"mode": "custom",
            "allowedHosts": ["pypi.org"]}; None when the daemon runs without networks.

        Raises:
            NotFoundError, CpuosError: as for `info`.
        """
        data = self._client.request("GET", self._path + "/network") or {}
        self.network = data.get("policy")
        return self.network

    def set_network(self, policy: NetworkPolicy) -> Optional[dict[str, Any]]:
        """Replace the sandbox's egress network policy: a running sandbox gets it at once, a
        paused one when it resumes.

        Args:
            policy: "allow-all", "deny-all", or a dict: "mode" ("allow-all", "deny-all" or
                "custom"), and lists "allowedHosts" (names; "*.example.com" for its subdomains)
                and "allowedCIDRs" (only with "custom", which must allow one or more), and
                "deniedCIDRs" (with any mode; they win over every allow). The list keys may be
                written allowed_hosts, allowed_cidrs and denied_cidrs.

        Returns:
            The new policy as the daemon keeps it (also in `network`); None when the daemon
            runs without networks (where only "deny-all" is accepted).

        Raises:
            BadRequestError: an invalid policy (an unknown mode or key, a bad name or CIDR, a
                custom policy that allows nothing).
            ConflictError: the sandbox is stopped.
            NotFoundError, CpuosError: as for `info`.
            TypeError, ValueError: `policy` is neither a string nor a mapping, or has a key in
                both spellings.
        """
        data = self._client.request("PUT", self._path + "/network",
                                    json_body=_network_policy(policy)) or {}
        self.network = data.get("policy")
        return self.network

    def get_request_transformations(self) -> List[Dict[str, Any]]:
        """The sandbox's request transformations: rules whose headers cpuosd's egress proxy
        sets on the requests that match, outside the sandbox. Each header value the caller
        gave literally reads "***"; a secret's reference ("{{secret:NAME}}") as it is.

        Raises:
            NotFoundError, CpuosError: as for `info`.
        """
        data = self._client.request("GET", self._path + "/network/transformations") or {}
        return _rules(data)

    def set_request_transformations(self, rules: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
        """Replace the sandbox's request transformations (the AI SDK's
        setRequestTransformations); an empty list removes them.

        Args:
            rules: dicts {"match": {"host": "api.example.com" (or "*.example.com", "*"),
                "path": {"exact" | "startsWith" | "regex": str}, "method": ["POST"],
                "queryString": [{"key": matcher, "value": matcher}], "headers": [...]},
                "transform": {"headers": {"Authorization": "Bearer ..."}}}; only "host" is
                needed in "match". A value's "{{secret:NAME}}" stands for the account's secret
                NAME, put in only where that secret is bound.

        Returns:
            The rules as `get_request_transformations` shows them.

        Raises:
            BadRequestError: an invalid rule, or a secret that does not exist.
            ConflictError: the sandbox is stopped.
            NotFoundError, CpuosError: as for `info`.
        """
        data = self._client.request("PUT", self._path + "/network/transformations",
                                    json_body={"transformations": [dict(r) for r in rules]}) or {}
        return _rules(data)

    def add_request_transformations(self, rules: Iterable[Mapping[str, Any]]) -> List[Dict[str, Any]]:
        """Add request transformations (the AI SDK's addRequestTransformations): a rule whose
        "match" equals one the sandbox has adds its headers to that one (the new value wins
        for a name); others are appended. Arguments, result and errors as
        `set_request_transformations`."""
        data = self._client.request("POST", self._path + "/network/transformations",
                                    json_body={"transformations": [dict(r) for r in rules]}) or {}
        return _rules(data)

    def kill(self) -> None:
        """Stop the sandbox (fine if it already stopped).

        Raises:
            NotFoundError, CpuosError: as for `info`.
        """
        self._client.request("DELETE", self._path)
        self.state = "stopped" if self.state in ("running", "paused") else self.state

    def pause(self) -> str:
        """Pause the sandbox: its VM stops, its memory, disk and processes are kept, and only
        storage is billed until it resumes. Pausing a paused sandbox is fine.

        Any later call on it (exec, files, processes) resumes it; so do `sbx.resume()` and
        `Sandbox.resume(session_id)`, which needs only the returned id (keep it with the
        conversation, say).

        Returns:
            The session id ("ses_..."); this handle's `state` is then "paused".

        Raises:
            ConflictError: the sandbox is stopped.
            NotFoundError: no such sandbox for this key.
            SandboxError: the daemon could not save the VM.
            CpuosError: the daemon failed, cannot be reached, or sent no session id.
        """
        self._update(self._client.request("POST", self._path + "/pause",
                                          timeout=_slow_timeout(self._client)))
        if not self.session_id:
            raise CpuosError(f"cpuosd paused {self.id} but sent no session id")
        return self.session_id

    #: `Sandbox.resume(session_or_id, *, api_key=None, api_url=None, request_timeout=...)` on
    #: the class, `sbx.resume()` on a handle: see `_resume_session` and `_resume_this`.
    resume = _Resume()

    @classmethod
    def _resume_session(cls: type[_S], session_or_id: str, *, api_key: Optional[str] = None,
                        api_url: Optional[str] = None,
                        request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> _S:
        """Resume a paused sandbox by the session id that `pause` returned (or its sandbox id).

        Resuming a running sandbox is fine: it is returned as it is.

        Args:
            session_or_id: "ses_..." from `pause`, or the sandbox's "sbx_..." id.
            api_key, api_url, request_timeout: as for `create`.

        Returns:
            A handle on the running sandbox, with its processes and files as they were.

        Raises:
            NotFoundError: no such session or sandbox for this key.
            ConflictError: the sandbox is stopped.
            SandboxError: the VM failed to come back.
            ValueError: an empty `session_or_id`.
            CpuosError: the daemon failed or cannot be reached.
        """
        client = shared_client(api_key, api_url, request_timeout)
        path = "/v1/sandboxes/" + path_segment(session_or_id, "a session or sandbox id")
        data = client.request("POST", path + "/resume", timeout=_slow_timeout(client))
        return cls(_data=data, _client=client)

    def _resume_this(self: _S) -> _S:
        """Resume this sandbox if it is paused (fine if it runs).

        Returns:
            self, with `state` "running".

        Raises:
            ConflictError: the sandbox is stopped.
            NotFoundError, SandboxError, CpuosError: as for `Sandbox.resume`.
        """
        self._update(self._client.request("POST", self._path + "/resume",
                                          timeout=_slow_timeout(self._client)))
        return self

    def fork(self: _S, count: int = 1) -> List[_S]:
        """Make `count` copies of the running sandbox: each a new sandbox with this one's
        memory, disk and processes as they are now. This one goes on running.

        Args:
            count: how many (1..16).

        Returns:
            The new sandboxes, running; their `parent` is this sandbox's id.

        Raises:
            BadRequestError: `count` out of range.
            QuotaError: the account may not run that many more sandboxes.
            ConflictError: the sandbox is stopped.
            NotFoundError, SandboxError, CpuosError: as for `pause`.
        """
        data = self._client.request("POST", self._path + "/fork", json_body={"count": count},
                                    timeout=_slow_timeout(self._client)) or {}
        return [type(self)(_data=d, _client=self._client) for d in data.get("sandboxes", [])]

    def checkpoint(self, name: str) -> Checkpoint:
        """Save the sandbox's memory, disk and processes as a named checkpoint, to start new
        sandboxes from with `Sandbox.create(checkpoint=...)`. The sandbox goes on running.

        Args:
            name: 1..64 characters of A-Z, a-z, 0-9, ".", "_" and "-", unique in the account.

        Returns:
            The Checkpoint.

        Raises:
            ConflictError: the name is taken, or the sandbox is stopped.
            BadRequestError: an invalid name.
            NotFoundError, SandboxError, CpuosError: as for `pause`.
        """
        data = self._client.request("POST", self._path + "/checkpoints", json_body={"name": name},
                                    timeout=_slow_timeout(self._client))
        return Checkpoint.from_json(data, self._client)

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


def _rules(data: Any) -> List[Dict[str, Any]]:
    """The "transformations" list of an API answer, checked to be a list of objects."""
    rules = data.get("transformations") if isinstance(data, dict) else None
    if not isinstance(rules, list) or not all(isinstance(r, dict) for r in rules):
        raise CpuosError("the API answered request transformations that are not a list of objects")
    return [dict(r) for r in rules]


def _network_policy(policy: NetworkPolicy) -> dict[str, Any]:
    """A network policy in the API's spelling: "allow-all" and "deny-all" become {"mode": ...};
    the keys allowed_hosts, allowed_cidrs and denied_cidrs become allowedHosts, allowedCIDRs and
    deniedCIDRs; tuples and sets become lists. Values go as given otherwise: the daemon judges
    them.

    Raises:
        TypeError: `policy` is neither a string nor a mapping.
        ValueError: a key given in both spellings.
    """
    if isinstance(policy, str):
        return {"mode": policy}
    if not isinstance(policy, Mapping):
        raise TypeError(f"a network policy is a string or a mapping, not {type(policy).__name__}")
    body: dict[str, Any] = {}
    for key, value in policy.items():
        name = _NETWORK_KEYS.get(key, key)
        if name in body:
            raise ValueError(f"network policy key {name!r} given twice (as {key!r})")
        body[name] = (list(value) if isinstance(value, (list, tuple, set, frozenset))
                      else value)
    return body


def _slow_timeout(client: Client) -> Optional[float]:
    """The socket timeout for a call that boots or saves a VM: the Client's, but at least
    `_CREATE_TIMEOUT` (None, waiting forever, stays None)."""
    return None if client.timeout is None else max(_CREATE_TIMEOUT, client.timeout)


def _show(timeout: Optional[Duration]) -> str:
    value = duration(timeout)
    return f"{value}s" if isinstance(value, int) else str(value)
