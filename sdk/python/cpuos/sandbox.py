"""Sandboxes: create, connect, list, exec, kill."""

from ._client import DEFAULT_TIMEOUT, Client, duration, seconds
from .errors import TimeoutError
from .files import Files
from .process import ExecResult, Process

_CREATE_TIMEOUT = 600.0  # a cold boot under TCG can take a while


class Sandbox:
    """A cpuos sandbox (a microVM). Use `Sandbox.create`, `Sandbox.connect` or `Sandbox.list`.

    `Sandbox(id, api_key=..., api_url=...)` makes a handle without asking the daemon."""

    def __init__(self, sandbox_id=None, *, api_key=None, api_url=None, request_timeout=DEFAULT_TIMEOUT,
                 _data=None, _client=None):
        self._client = _client or Client(api_key=api_key, api_url=api_url, timeout=request_timeout)
        self._update(_data or {"id": sandbox_id})
        if not self.id:
            raise ValueError("a sandbox id is required")
        self.files = Files(self)

    def _update(self, data):
        self.data = data
        self.id = data.get("id")
        self.template = data.get("template")
        self.state = data.get("state")
        self.vcpus = data.get("vcpus")
        self.memory_mb = data.get("memory_mb")
        self.disk_mb = data.get("disk_mb")
        self.created_at = data.get("created_at")
        self.expires_at = data.get("expires_at")
        self.metadata = data.get("metadata") or {}
        self.end_reason = data.get("end_reason")

    def __repr__(self):
        return f"<Sandbox {self.id} template={self.template} state={self.state}>"

    def __eq__(self, other):
        return isinstance(other, Sandbox) and other.id == self.id

    def __hash__(self):
        return hash(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False

    @property
    def _path(self):
        return f"/v1/sandboxes/{self.id}"

    @classmethod
    def create(cls, template="python", timeout=None, vcpus=None, memory_mb=None, disk_mb=None,
               env=None, metadata=None, *, api_key=None, api_url=None,
               request_timeout=DEFAULT_TIMEOUT):
        """Start a sandbox and return it once it is ready.

        `timeout` ("30m" or seconds, default 5m) is when the daemon kills it."""
        client = Client(api_key=api_key, api_url=api_url, timeout=request_timeout)
        body = {"template": template}
        for key, value in (("timeout", duration(timeout)), ("vcpus", vcpus), ("memory_mb", memory_mb),
                           ("disk_mb", disk_mb), ("env", env), ("metadata", metadata)):
            if value is not None:
                body[key] = value
        data = client.request("POST", "/v1/sandboxes", json_body=body,
                              timeout=max(_CREATE_TIMEOUT, request_timeout or 0))
        return cls(_data=data, _client=client)

    @classmethod
    def connect(cls, sandbox_id, *, api_key=None, api_url=None, request_timeout=DEFAULT_TIMEOUT):
        """The existing sandbox `sandbox_id` (NotFoundError if this key cannot see it)."""
        return cls(sandbox_id, api_key=api_key, api_url=api_url, request_timeout=request_timeout).info()

    @classmethod
    def list(cls, state=None, metadata=None, *, page_size=None, api_key=None, api_url=None,
             request_timeout=DEFAULT_TIMEOUT):
        """Every sandbox this key can see, newest first, following all pages.

        Filter by `state` ("running", "stopped", "lost") and `metadata` (all pairs must match)."""
        client = Client(api_key=api_key, api_url=api_url, timeout=request_timeout)
        query = {"state": state, "limit": page_size}
        for k, v in (metadata or {}).items():
            query[f"metadata.{k}"] = v
        out, cursor = [], None
        while True:
            page = client.request("GET", "/v1/sandboxes", query=dict(query, cursor=cursor))
            out.extend(cls(_data=d, _client=client) for d in page.get("sandboxes", []))
            cursor = page.get("next_cursor")
            if not cursor:
                return out

    def info(self):
        """Refresh this sandbox's fields from the daemon; return self."""
        self._update(self._client.request("GET", self._path))
        return self

    def is_running(self):
        return self.info().state == "running"

    def set_timeout(self, timeout):
        """The sandbox now expires `timeout` ("1h" or seconds) from now."""
        self._update(self._client.request("POST", self._path + "/timeout",
                                          json_body={"timeout": duration(timeout)}))
        return self

    def kill(self):
        """Stop the sandbox (fine if it already stopped)."""
        self._client.request("DELETE", self._path)
        self.state = "stopped" if self.state == "running" else self.state

    def exec(self, cmd, timeout=None, env=None, cwd=None, user=None, stdin=None, background=False):
        """Run `cmd` (a str for /bin/sh -c, or an argv list).

        Returns an ExecResult, or a Process with `background=True`. Raises cpuos.TimeoutError
        (with the partial result in `.result`) if `timeout` killed the command."""
        body = {"argv": [str(a) for a in cmd]} if isinstance(cmd, (list, tuple)) else {"cmd": cmd}
        if stdin is not None:
            if isinstance(stdin, (bytes, bytearray)):
                stdin = bytes(stdin).decode("utf-8")  # the API carries stdin as JSON text
            body["stdin"] = stdin
        for key, value in (("timeout", duration(timeout)), ("env", env), ("cwd", cwd), ("user", user)):
            if value is not None:
                body[key] = value
        if background:
            body["background"] = True
            return Process(self, self._client.request("POST", self._path + "/exec", json_body=body))
        limit = seconds(timeout)
        result = ExecResult.from_json(self._client.request(
            "POST", self._path + "/exec", json_body=body,
            timeout=None if timeout is None else (limit or 0) + 60))
        if result.timed_out:
            raise TimeoutError(f"command timed out after {_show(timeout)}: {cmd!r}", result=result)
        return result

    def processes(self):
        """The sandbox's background processes."""
        data = self._client.request("GET", self._path + "/processes")
        return [Process(self, p) for p in data.get("processes", [])]

    def process(self, pid):
        """The background process `pid`."""
        return Process(self, self._client.request("GET", f"{self._path}/processes/{pid}"))


def _show(timeout):
    value = duration(timeout)
    return f"{value}s" if isinstance(value, int) else value
