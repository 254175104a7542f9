"""HTTP transport to cpuosd: TCP or a Unix socket, with a small pool of keep-alive connections.

A Client keeps up to `max_idle` idle HTTP/1.1 connections and sends the next request on one of
them. A connection goes back to the pool only once its response was read to the end. Sandbox
handles share one Client per daemon, key and timeout (`shared_client`)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import http.client
import io
import json
import math
import os
import re
import select
import socket
import stat
import threading
import urllib.parse
from types import TracebackType
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Optional, Union

from .errors import CpuosError, TimeoutError, error_from_response

DEFAULT_SOCKET = "/run/cpuos/cpuosd.sock"
DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 300.0  # seconds of socket inactivity before a call gives up
MAX_IDLE = 8  # idle connections a Client keeps; the daemon spends a thread on each
_BLOCK = 64 * 1024
_ERROR_BODY_MAX = 1 << 20
_USER_AGENT = "cpuos-python/0.1.0"

#: A request body: bytes, text (sent as UTF-8), a binary file object or an iterator of chunks.
Body = Union[bytes, bytearray, memoryview, str, IO[bytes], Iterable[Union[bytes, str]]]
#: A duration: "90s", "30m", "1h30m", a number of seconds or a timedelta.
Duration = Union[str, int, float, datetime.timedelta]


class _Default(enum.Enum):
    TIMEOUT = "the Client's timeout"


#: The `timeout` of `Client.open` and `Client.request` when not given: the Client's own.
CLIENT_TIMEOUT = _Default.TIMEOUT


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float] = None, blocksize: int = _BLOCK) -> None:
        super().__init__("localhost", timeout=timeout, blocksize=blocksize)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


class _Stale(Exception):
    """A reused idle connection that the server had closed before answering."""


def resolve_url(api_key: Optional[str], api_url: Optional[str]) -> str:
    """The daemon URL: explicit, else $CPUOS_API_URL, else the local socket (no key), else TCP.

    Args:
        api_key: the API key in use; without one the local socket is preferred when it exists.
        api_url: an explicit URL, which wins.

    Returns:
        A `http://`, `https://` or `unix://` URL (or a socket path starting with "/").
    """
    url = api_url or os.environ.get("CPUOS_API_URL")
    if url:
        return url
    if not api_key and os.path.exists(DEFAULT_SOCKET):
        return "unix://" + DEFAULT_SOCKET
    return DEFAULT_URL


@dataclasses.dataclass(frozen=True)
class PoolStats:
    """What a Client's connection pool has done so far (see `Client.pool_stats`).

    Attributes:
        opened: connections made.
        reused: requests sent on an idle connection taken from the pool.
        retried: requests sent again on a new connection because a reused one had been closed
            by the server before it answered.
        idle: connections in the pool now.
    """

    opened: int
    reused: int
    retried: int
    idle: int


class Client:
    """Connection settings, a pool of idle keep-alive connections and request helpers.

    Thread-safe: a connection is used by one request at a time and the pool is locked.

    Args:
        api_key: the bearer key; default $CPUOS_API_KEY, or none (the local socket's administrator).
        api_url: `http://host:port`, `https://...` or `unix:///path/to.sock`; default
            $CPUOS_API_URL, else the local socket when it exists and no key is set, else
            http://127.0.0.1:7070.
        timeout: seconds of socket inactivity before a call gives up (None: wait forever).
        max_idle: how many idle connections to keep for reuse (0 disables reuse).

    Raises:
        ValueError: the URL is not one of the forms above.
    """

    def __init__(self, api_key: Optional[str] = None, api_url: Optional[str] = None,
                 timeout: Optional[float] = DEFAULT_TIMEOUT, max_idle: int = MAX_IDLE) -> None:
        self.api_key = api_key if api_key is not None else (os.environ.get("CPUOS_API_KEY") or None)
        self.api_url = resolve_url(self.api_key, api_url)
        self.timeout = timeout
        self.max_idle = max_idle
        self._host: Optional[str] = None
        self._port: Optional[int] = None
        self._socket_path = ""
        url = self.api_url
        if url.startswith("/"):
            url = "unix://" + url
        parts = urllib.parse.urlsplit(url)
        self._scheme = parts.scheme
        if parts.scheme == "unix":
            self._socket_path = parts.path or DEFAULT_SOCKET
            self._prefix = ""
        elif parts.scheme in ("http", "https"):
            if not parts.hostname:
                raise ValueError(f"bad cpuos API URL {self.api_url!r}")
            self._host, self._port = parts.hostname, parts.port
            prefix = parts.path.rstrip("/")
            self._prefix = prefix[:-3] if prefix.endswith("/v1") else prefix
        else:
            raise ValueError(f"bad cpuos API URL {self.api_url!r}: use http://, https:// or unix://")
        self._lock = threading.Lock()
        self._idle: list[http.client.HTTPConnection] = []
        self._pid = os.getpid()
        self._opened = self._reused = self._retried = 0

    def __enter__(self) -> Client:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def close(self) -> None:
        """Close the idle connections. The Client stays usable: later calls open new ones."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def pool_stats(self) -> PoolStats:
        """Counts of connections opened and reused so far, and of those idle now.

        Returns:
            A PoolStats snapshot.
        """
        with self._lock:
            return PoolStats(opened=self._opened, reused=self._reused, retried=self._retried,
                             idle=len(self._idle))

    def _new_connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        conn: http.client.HTTPConnection
        if self._scheme == "unix":
            conn = _UnixHTTPConnection(self._socket_path, timeout=timeout)
        elif self._scheme == "https":
            conn = http.client.HTTPSConnection(self._host or "", self._port, timeout=timeout,
                                               blocksize=_BLOCK)
        else:
            conn = http.client.HTTPConnection(self._host or "", self._port, timeout=timeout,
                                              blocksize=_BLOCK)
        with self._lock:
            self._opened += 1
        return conn

    def _take(self) -> Optional[http.client.HTTPConnection]:
        """An idle connection from the pool that the server has not closed, or None."""
        with self._lock:
            if os.getpid() != self._pid:
                # A forked child shares these sockets with its parent: never write to them.
                self._idle, self._pid = [], os.getpid()
            while self._idle:
                conn = self._idle.pop()  # the most recently used: the least likely to be stale
                if _dropped(conn):
                    conn.close()
                    continue
                self._reused += 1
                return conn
        return None

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        """Pool a connection whose response was read to the end, or close it if the pool is full."""
        if conn.sock is None:  # the server said "Connection: close"; http.client closed it
            return
        with self._lock:
            if len(self._idle) < self.max_idle and os.getpid() == self._pid:
                self._idle.append(conn)
                return
        conn.close()

    def open(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
             json_body: Any = None, body: Optional[Body] = None,
             headers: Optional[Mapping[str, str]] = None,
             timeout: Union[float, None, _Default] = CLIENT_TIMEOUT) -> Response:
        """Send a request and return its answer unread, for a 2xx status.

        A request whose body can be sent again (none, bytes, text or JSON) goes on an idle pooled
        connection if there is one, and is sent once more on a new connection if that one turns
        out closed by the server before any byte of an answer. A streamed body (a file or an
        iterator) always gets a new connection, since it cannot be sent twice.

        Args:
            method: the HTTP method.
            path: the path under the API URL, e.g. "/v1/sandboxes".
            query: query parameters; None values are left out, booleans become true/false.
            json_body: a value sent as JSON (wins over `body`).
            body: raw bytes, text, a binary file or an iterator of chunks, sent as
                application/octet-stream (chunked when its length is unknown).
            headers: extra request headers.
            timeout: seconds of socket inactivity before giving up; None waits forever; default
                the Client's.

        Returns:
            A Response; the caller reads it and closes it (or uses `with`).

        Raises:
            CpuosError: the daemon cannot be reached, or answered an error status (the subclass
                for that status, see cpuos.errors).
            TimeoutError: no answer within `timeout`.
        """
        limit = self.timeout if isinstance(timeout, _Default) else timeout
        url = self._prefix + path
        if query:
            pairs = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote, safe="/")
        hdrs = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        if self.api_key:
            hdrs["Authorization"] = f"Bearer {self.api_key}"
        payload: Any = None
        if json_body is not None:
            payload = json.dumps(json_body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif body is not None:
            hdrs["Content-Type"] = "application/octet-stream"
            payload, length = _body_and_length(body)
            if length is not None:
                hdrs["Content-Length"] = str(length)
            else:
                hdrs["Transfer-Encoding"] = "chunked"
        elif method in ("POST", "PUT", "PATCH"):
            payload = b""
        hdrs.update(headers or {})
        resendable = payload is None or isinstance(payload, (bytes, bytearray, memoryview))
        conn = self._take() if resendable else None
        answered = None
        try:
            if conn is not None:
                try:
                    answered = self._send(conn, True, method, url, payload, hdrs, limit)
                except _Stale:
                    with self._lock:
                        self._retried += 1
            if answered is None:
                conn = self._new_connection(limit)
                answered = self._send(conn, False, method, url, payload, hdrs, limit)
        except socket.timeout as e:
            raise TimeoutError(f"no answer from cpuosd at {self.api_url} within {limit}s") from e
        except (OSError, http.client.HTTPException) as e:
            raise CpuosError(f"cannot reach cpuosd at {self.api_url}: {e}") from e
        conn, resp, sent = answered
        answer = Response(self, conn, resp, reusable=sent)
        if resp.status >= 400:
            with answer:
                try:
                    data = answer.read(_ERROR_BODY_MAX)
                except CpuosError:
                    data = b""
            raise error_from_response(resp.status, data)
        return answer

    def _send(self, conn: http.client.HTTPConnection, reused: bool, method: str, url: str,
              payload: Any, hdrs: Mapping[str, str],
              timeout: Optional[float]
              ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, bool]:
        """One request on `conn`: `conn`, its response, and whether the whole body went out.

        Closes `conn` on any error. Raises _Stale if a reused connection was closed before any
        byte of an answer: the daemon closes only idle connections, so the request never ran."""
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        sent = True
        try:
            try:
                conn.request(method, url, body=payload, headers=dict(hdrs),
                             encode_chunked="Transfer-Encoding" in hdrs)
            except (BrokenPipeError, ConnectionResetError):
                if reused:
                    raise _Stale()
                # The daemon may answer (e.g. 413) and stop reading before the body ends; the
                # rest of the body is then lost, so the connection is not reused.
                sent = False
            try:
                return conn, conn.getresponse(), sent
            except (ConnectionResetError, BrokenPipeError) as e:  # RemoteDisconnected too
                if reused:
                    raise _Stale() from e
                raise
        except BaseException:
            conn.close()
            raise

    def request(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
                json_body: Any = None, body: Optional[Body] = None,
                timeout: Union[float, None, _Default] = CLIENT_TIMEOUT) -> Any:
        """Send a request and return its JSON answer.

        Args:
            method, path, query, json_body, body, timeout: as for `open`.

        Returns:
            The decoded JSON value, or None for an empty answer.

        Raises:
            CpuosError: the daemon cannot be reached, answered an error status, broke the
                connection or sent invalid JSON.
            TimeoutError: no answer within `timeout`.
        """
        with self.open(method, path, query=query, json_body=json_body, body=body,
                       timeout=timeout) as resp:
            return resp.json()


_SHARED: dict[tuple[str, Optional[str], Optional[float]], Client] = {}
_SHARED_LOCK = threading.Lock()


def shared_client(api_key: Optional[str] = None, api_url: Optional[str] = None,
                  timeout: Optional[float] = DEFAULT_TIMEOUT) -> Client:
    """The process's Client for these settings, made on first use.

    Sandbox handles share it: however many of them a program holds, it keeps at most `MAX_IDLE`
    idle connections per daemon and key (the daemon limits the connections from one address).

    Args:
        api_key, api_url, timeout: as for `Client`.

    Returns:
        The shared Client.

    Raises:
        ValueError: a bad API URL.
    """
    key = api_key if api_key is not None else (os.environ.get("CPUOS_API_KEY") or None)
    url = resolve_url(key, api_url)
    with _SHARED_LOCK:
        client = _SHARED.get((url, key, timeout))
        if client is None:
            client = _SHARED[(url, key, timeout)] = Client(api_key=key, api_url=url, timeout=timeout)
        return client


class Response:
    """A 2xx answer from cpuosd, read by the caller and then closed.

    `close()` returns the connection to its Client's pool when the body was read to the end, and
    closes it otherwise (an unread rest would corrupt the next request on it). Reads raise
    CpuosError, or TimeoutError when the socket is silent for longer than the timeout."""

    def __init__(self, client: Client, conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse, reusable: bool = True) -> None:
        self._client = client
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self._reusable = reusable
        self.status: int = resp.status
        self.headers: http.client.HTTPMessage = resp.headers

    @property
    def content_type(self) -> str:
        """The media type of the body without parameters, e.g. "application/json"."""
        return self.headers.get_content_type()

    def __enter__(self) -> Response:
        return self

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.close()

    def __iter__(self) -> Iterator[bytes]:
        """Yield the body line by line (each with its newline, but the last)."""
        while True:
            line = self._guard(self._resp.readline)
            if not line:
                return
            yield line

    def read(self, amt: Optional[int] = None) -> bytes:
        """Read the rest of the body, or at most `amt` bytes of it (b"" at the end).

        Raises:
            CpuosError: the connection broke.
            TimeoutError: the daemon stopped sending.
        """
        return self._guard(lambda: self._resp.read(amt))

    def read1(self, n: int = -1) -> bytes:
        """Read at most `n` bytes with at most one system call (b"" at the end).

        Raises:
            CpuosError: the connection broke.
            TimeoutError: the daemon stopped sending.
        """
        return self._guard(lambda: self._resp.read1(n))

    def json(self) -> Any:
        """Read the rest of the body as JSON.

        Returns:
            The decoded value, or None for an empty body.

        Raises:
            CpuosError: the connection broke or the body is not JSON.
            TimeoutError: the daemon stopped sending.
        """
        data = self.read()
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise CpuosError(f"cpuosd sent invalid JSON: {data[:200]!r}", status=self.status) from e

    def drain(self, limit: int = _BLOCK, timeout: float = 2.0) -> None:
        """Read what is left of the body, if it ends within `limit` bytes and `timeout` seconds,
        so that `close()` can reuse the connection. Errors only make `close()` close it."""
        if self._conn is None or self._resp.isclosed() or self._conn.sock is None:
            return
        try:
            self._conn.sock.settimeout(timeout)
            self._resp.read(limit)
        except (OSError, http.client.HTTPException):
            self._reusable = False

    def abort(self) -> None:
        """Cut the connection under a reader in another thread (it then sees the end)."""
        self._reusable = False
        conn = self._conn
        sock = conn.sock if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        """Give the connection back to the pool if the body was read to its end, else close it."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        # read1() leaves a finished fixed-length body open, with nothing left to read.
        complete = self._resp.isclosed() or self._resp.length == 0
        self._resp.close()
        if complete and self._reusable:
            self._client._give_back(conn)
        else:
            conn.close()

    def _guard(self, read: Callable[[], bytes]) -> bytes:
        try:
            data: bytes = read()
            return data
        except socket.timeout as e:
            self._reusable = False
            raise TimeoutError(f"cpuosd at {self._client.api_url} stopped answering") from e
        except (OSError, http.client.HTTPException, ValueError) as e:
            # ValueError: the file was closed under us.
            self._reusable = False
            raise CpuosError(f"lost the connection to cpuosd at {self._client.api_url}: {e}") from e


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """True if an idle connection is unusable: readable while idle means EOF (or junk)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
        return bool(readable)
    except (OSError, ValueError):
        return True


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _body_and_length(body: Body) -> tuple[Any, Optional[int]]:
    """A request body for http.client and its length (None: send chunked)."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return body, len(body)
    if hasattr(body, "read"):
        return body, _remaining(body)  # type: ignore[arg-type]
    if hasattr(body, "__iter__"):
        return _chunks(body), None
    raise TypeError(f"cannot send a {type(body).__name__}: use bytes, str, a file or an iterator of bytes")


def _remaining(f: IO[bytes]) -> Optional[int]:
    """Bytes left in a file-like object, or None if it cannot tell."""
    try:
        pos = f.tell()
        try:
            st = os.fstat(f.fileno())
        except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
            if not f.seekable():
                return None
            end = f.seek(0, os.SEEK_END)
            f.seek(pos)
            return end - pos
        return st.st_size - pos if stat.S_ISREG(st.st_mode) else None
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None


def _chunks(it: Iterable[Union[bytes, str]]) -> Iterator[bytes]:
    for chunk in it:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        if chunk:
            yield bytes(chunk)


def path_segment(value: str, what: str) -> str:
    """`value` percent-encoded as one path segment ("/", "?" and "%" included), for ids and names
    that come from users.

    Args:
        value: the id or name.
        what: what it is, for the error message.

    Raises:
        ValueError: `value` is empty or not a string.
    """
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} is required")
    return urllib.parse.quote(value, safe="")

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def duration(value: Optional[Duration]) -> Union[str, int, float, None]:
    """A duration for the API: "2m"-style strings as given, numbers as whole seconds.

    Args:
        value: "90s", "30m", "1h30m", a number of seconds, a timedelta, or None.

    Returns:
        The stripped string, the seconds rounded up, or None for None.

    Raises:
        TypeError: `value` is of another type (a bool included).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError("a duration is a string like '2m' or a number of seconds")
    if isinstance(value, datetime.timedelta):
        value = value.total_seconds()
    if isinstance(value, (int, float)):
        return int(math.ceil(value)) if value == value and value not in (math.inf, -math.inf) else value
    if isinstance(value, str):
        return value.strip()
    raise TypeError("a duration is a string like '2m' or a number of seconds")


def duration_query(value: Optional[Duration]) -> Union[str, float, None]:
    """A duration for a query string: numbers become "Ns".

    Raises:
        TypeError: as `duration`.
    """
    value = duration(value)
    return f"{value}s" if isinstance(value, int) else value


def seconds(value: Optional[Duration]) -> Optional[float]:
    """Seconds in a duration, or None if it does not parse (the daemon will say why).

    Raises:
        TypeError: as `duration`.
    """
    value = duration(value)
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        if value.isdigit():
            return float(value)
        m = _DURATION.match(value)
        if m and any(m.groups()):
            h, mi, s = (int(g or 0) for g in m.groups())
            return float(h * 3600 + mi * 60 + s)
    return None
