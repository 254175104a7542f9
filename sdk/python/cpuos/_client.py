"""HTTP transport to cpuosd: TCP or a Unix socket, one connection per call."""

import datetime
import http.client
import io
import json
import math
import os
import re
import socket
import stat
import urllib.parse

from .errors import CpuosError, TimeoutError, error_from_response

DEFAULT_SOCKET = "/run/cpuos/cpuosd.sock"
DEFAULT_URL = "http://127.0.0.1:7070"
DEFAULT_TIMEOUT = 300.0  # seconds of socket inactivity before a call gives up
_BLOCK = 64 * 1024
_USER_AGENT = "cpuos-python/0.1.0"


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=None, blocksize=_BLOCK):
        super().__init__("localhost", timeout=timeout, blocksize=blocksize)
        self._socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def resolve_url(api_key, api_url):
    """The daemon URL: explicit, else $CPUOS_API_URL, else the local socket (no key), else TCP."""
    url = api_url or os.environ.get("CPUOS_API_URL")
    if url:
        return url
    if not api_key and os.path.exists(DEFAULT_SOCKET):
        return "unix://" + DEFAULT_SOCKET
    return DEFAULT_URL


class Client:
    """Connection settings plus request helpers. Thread-safe: it holds no connection."""

    def __init__(self, api_key=None, api_url=None, timeout=DEFAULT_TIMEOUT):
        self.api_key = api_key if api_key is not None else (os.environ.get("CPUOS_API_KEY") or None)
        self.api_url = resolve_url(self.api_key, api_url)
        self.timeout = timeout
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

    def _connection(self, timeout):
        if self._scheme == "unix":
            return _UnixHTTPConnection(self._socket_path, timeout=timeout)
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=timeout, blocksize=_BLOCK)

    def open(self, method, path, query=None, json_body=None, body=None, headers=None, timeout=...):
        """Send a request; return (connection, response) for a 2xx answer, else raise.

        The caller reads the response and closes the connection."""
        if timeout is ...:
            timeout = self.timeout
        url = self._prefix + path
        if query:
            pairs = [(k, _query_value(v)) for k, v in query.items() if v is not None]
            if pairs:
                url += "?" + urllib.parse.urlencode(pairs, quote_via=urllib.parse.quote, safe="/")
        hdrs = {"User-Agent": _USER_AGENT, "Accept": "application/json"}
        if self.api_key:
            hdrs["Authorization"] = f"Bearer {self.api_key}"
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            hdrs["Content-Type"] = "application/json"
        elif body is not None:
            hdrs["Content-Type"] = "application/octet-stream"
            body, length = _body_and_length(body)
            if length is not None:
                hdrs["Content-Length"] = str(length)
            else:
                hdrs["Transfer-Encoding"] = "chunked"
        elif method in ("POST", "PUT", "PATCH"):
            body = b""
        hdrs.update(headers or {})
        conn = self._connection(timeout)
        try:
            try:
                conn.request(method, url, body=body, headers=hdrs,
                             encode_chunked="Transfer-Encoding" in hdrs)
            except (BrokenPipeError, ConnectionResetError):
                # The daemon may answer (e.g. 413) and stop reading before the body ends.
                pass
            resp = conn.getresponse()
        except socket.timeout as e:
            conn.close()
            raise TimeoutError(f"no answer from cpuosd at {self.api_url} within {timeout}s") from e
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise CpuosError(f"cannot reach cpuosd at {self.api_url}: {e}") from e
        if resp.status >= 400:
            try:
                data = resp.read(1 << 20)
            except (OSError, http.client.HTTPException):
                data = b""
            conn.close()
            raise error_from_response(resp.status, data)
        return conn, resp

    def request(self, method, path, query=None, json_body=None, body=None, timeout=...):
        """Send a request and return its JSON answer (None for an empty one)."""
        conn, resp = self.open(method, path, query=query, json_body=json_body, body=body,
                               timeout=timeout)
        try:
            data = resp.read()
        except socket.timeout as e:
            raise TimeoutError(f"cpuosd at {self.api_url} stopped answering") from e
        except (OSError, http.client.HTTPException) as e:
            raise CpuosError(f"lost the connection to cpuosd at {self.api_url}: {e}") from e
        finally:
            conn.close()
        if not data.strip():
            return None
        try:
            return json.loads(data)
        except ValueError as e:
            raise CpuosError(f"cpuosd sent invalid JSON: {data[:200]!r}", status=resp.status) from e


def _query_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def _body_and_length(body):
    """A request body for http.client and its length (None: send chunked)."""
    if isinstance(body, str):
        body = body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return body, len(body)
    if hasattr(body, "read"):
        return body, _remaining(body)
    if hasattr(body, "__iter__"):
        return _chunks(body), None
    raise TypeError(f"cannot send a {type(body).__name__}: use bytes, str, a file or an iterator of bytes")


def _remaining(f):
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


def _chunks(it):
    for chunk in it:
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8")
        if chunk:
            yield bytes(chunk)


_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def duration(value):
    """A duration for the API: "2m"-style strings as given, numbers as whole seconds."""
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


def duration_query(value):
    """A duration for a query string: numbers become "Ns"."""
    value = duration(value)
    return f"{value}s" if isinstance(value, int) else value


def seconds(value):
    """Seconds in a duration, or None if it does not parse (the daemon will say why)."""
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
