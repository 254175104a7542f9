"""Files in a sandbox: streamed up and down, never held whole by the SDK."""

import dataclasses
import os
from typing import Optional

from .errors import NotFoundError

CHUNK = 64 * 1024


@dataclasses.dataclass
class Entry:
    """A file system entry. `type` is "file", "dir", "symlink" or "other"."""

    path: str
    name: Optional[str] = None
    type: Optional[str] = None
    size: Optional[int] = None
    mode: Optional[str] = None
    mtime: Optional[str] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    target: Optional[str] = None

    @classmethod
    def from_json(cls, d):
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})

    @property
    def is_dir(self):
        return self.type == "dir"


def _mode(mode):
    if mode is None:
        return None
    return format(mode, "04o") if isinstance(mode, int) else str(mode)


class Files:
    """`sandbox.files`: read, write, list and manage files in the sandbox."""

    def __init__(self, sandbox):
        self._sandbox = sandbox

    @property
    def _client(self):
        return self._sandbox._client

    @property
    def _base(self):
        return f"/v1/sandboxes/{self._sandbox.id}/files"

    def write(self, path, data, mode=None, user=None):
        """Write bytes, str (UTF-8), a binary file object or an iterator of bytes to `path`.

        Parent directories are created. Returns the Entry (path and size) written."""
        d = self._client.request("PUT", self._base, body=data,
                                 query={"path": path, "mode": _mode(mode), "user": user})
        return Entry.from_json(d or {"path": path})

    def upload(self, local_path, path, mode=None, user=None):
        """Upload a local file to `path` in the sandbox."""
        with open(local_path, "rb") as f:
            return self.write(path, f, mode=mode, user=user)

    def read_stream(self, path, chunk_size=CHUNK):
        """Yield the file's bytes in chunks of at most `chunk_size`."""
        conn, resp = self._client.open("GET", self._base, query={"path": path})
        try:
            while True:
                chunk = resp.read1(chunk_size) if hasattr(resp, "read1") else resp.read(chunk_size)
                if not chunk:
                    break
                yield chunk
        finally:
            conn.close()

    def read(self, path):
        """The whole file as bytes."""
        return b"".join(self.read_stream(path))

    def read_text(self, path, encoding="utf-8", errors="strict"):
        """The whole file decoded as text."""
        return self.read(path).decode(encoding, errors)

    def download(self, path, local_path, chunk_size=CHUNK):
        """Copy a sandbox file to a local path in chunks; return the number of bytes."""
        n = 0
        tmp = f"{local_path}.part"
        try:
            with open(tmp, "wb") as f:
                for chunk in self.read_stream(path, chunk_size):
                    f.write(chunk)
                    n += len(chunk)
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return n

    def stat(self, path):
        """The Entry at `path` (NotFoundError if there is none)."""
        return Entry.from_json(self._client.request("GET", self._base + "/stat", query={"path": path}))

    def exists(self, path):
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def list(self, path, depth=1):
        """Entries under the directory `path`, `depth` levels deep (1..16)."""
        d = self._client.request("GET", self._base + "/list", query={"path": path, "depth": depth})
        return [Entry.from_json(e) for e in d.get("entries", [])]

    def mkdir(self, path, parents=True, mode=None, user=None):
        """Create a directory; return its Entry."""
        body = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = _mode(mode)
        if user is not None:
            body["user"] = user
        return Entry.from_json(self._client.request("POST", self._base + "/mkdir", json_body=body))

    def remove(self, path, recursive=False):
        """Delete a file, or a directory (its contents too with `recursive=True`)."""
        self._client.request("DELETE", self._base, query={"path": path, "recursive": recursive or None})

    def rename(self, src, dst):
        """Move `src` to `dst`; return the new Entry."""
        d = self._client.request("POST", self._base + "/rename", json_body={"from": src, "to": dst})
        return Entry.from_json(d)
