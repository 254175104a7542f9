"""Files in a sandbox: streamed up and down, never held whole by the SDK."""

from __future__ import annotations

import dataclasses
import json
import os
import queue
import tarfile
import tempfile
import threading
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Mapping, Optional, Union

from ._client import Body, Client, Response
from .errors import CpuosError, NotFoundError

if TYPE_CHECKING:
    from .sandbox import Sandbox

CHUNK = 64 * 1024

#: A file mode: 0o644, or an octal string like "0644".
Mode = Union[int, str]
#: A local path.
LocalPath = Union[str, "os.PathLike[str]"]


@dataclasses.dataclass
class Entry:
    """A file system entry in a sandbox.

    Attributes:
        path: the absolute path.
        name: the last component of the path.
        type: "file", "dir", "symlink" or "other".
        size: the size in bytes.
        mode: the permission bits as an octal string, e.g. "0644".
        mtime: the modification time (RFC 3339).
        uid, gid: the owner's ids.
        target: where a symlink points.
    """

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
    def from_json(cls, d: Mapping[str, Any]) -> Entry:
        """The entry in an API answer; unknown fields are ignored.

        Args:
            d: the decoded JSON object (it must have "path").

        Returns:
            The Entry.
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in fields})

    @property
    def is_dir(self) -> bool:
        """Whether the entry is a directory."""
        return self.type == "dir"


def _mode(mode: Optional[Mode]) -> Optional[str]:
    if mode is None:
        return None
    return format(mode, "04o") if isinstance(mode, int) else str(mode)


class Files:
    """`sandbox.files`: read, write, list and manage files in the sandbox.

    Every method raises NotFoundError when the sandbox is gone (or belongs to another key),
    ConflictError when it is not running, and CpuosError when the daemon fails or cannot be
    reached; the other errors are listed per method."""

    def __init__(self, sandbox: Sandbox) -> None:
        self._sandbox = sandbox

    @property
    def _client(self) -> Client:
        return self._sandbox.client

    @property
    def _base(self) -> str:
        return f"/v1/sandboxes/{self._sandbox.id}/files"

    def write(self, path: str, data: Body, mode: Optional[Mode] = None,
              user: Optional[str] = None) -> Entry:
        """Write a file; parent directories are created.

        Args:
            path: the absolute path in the sandbox.
            data: bytes, str (UTF-8), a binary file object or an iterator of bytes (streamed).
            mode: the permission bits, e.g. 0o755 or "0755".
            user: who owns it ("user" or "root").

        Returns:
            The Entry (path and size) written.

        Raises:
            BadRequestError: the path or mode is invalid, or the file is larger than the
                daemon's max_file_bytes (413).
            TypeError: `data` is of another type.
        """
        d = self._client.request("PUT", self._base, body=data,
                                 query={"path": path, "mode": _mode(mode), "user": user})
        return Entry.from_json(d or {"path": path})

    def upload(self, local_path: LocalPath, path: str, mode: Optional[Mode] = None,
               user: Optional[str] = None) -> Entry:
        """Upload a local file to `path` in the sandbox, streamed.

        Args:
            local_path: the file to send.
            path, mode, user: as for `write`.

        Returns:
            The Entry written.

        Raises:
            OSError: `local_path` cannot be read.
            BadRequestError: as for `write`.
        """
        with open(local_path, "rb") as f:
            return self.write(path, f, mode=mode, user=user)

    def write_archive(self, path: str, data: Body, user: Optional[str] = None) -> None:
        """Unpack a tar archive (bytes, a binary file or an iterator of bytes, streamed) under
        directory `path` in the sandbox, made if missing; what it unpacks belongs to `user`.

        Raises:
            BadRequestError: not an archive the sandbox's tar takes (the message says why), or
                larger than the daemon's max_file_bytes.
        """
        self._client.request("PUT", self._base + "/archive", body=data,
                             query={"path": path, "user": user})

    def read_archive(self, path: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        """Yield a tar archive of the directory (or file) at `path`, as it is made.

        Raises:
            NotFoundError: there is nothing at `path`.
            CpuosError: the sandbox's tar failed midway (the stream was cut).
        """
        with self._client.open("GET", self._base + "/archive", query={"path": path},
                               timeout=None) as resp:
            while True:
                chunk = resp.read1(chunk_size)
                if not chunk:
                    return
                yield chunk

    def upload_dir(self, local_dir: LocalPath, path: str, user: Optional[str] = None) -> None:
        """Copy a local directory's contents under `path` in the sandbox (one tar stream).

        Raises:
            OSError: `local_dir` cannot be read.
            BadRequestError: as for `write_archive`.
        """
        with tempfile.TemporaryFile() as f:
            with tarfile.open(fileobj=f, mode="w") as tar:
                tar.add(os.fspath(local_dir), arcname=".")
            f.seek(0)
            self.write_archive(path, f, user=user)

    def download_dir(self, path: str, local_dir: LocalPath) -> None:
        """Copy the directory at `path` in the sandbox into `local_dir` (made if missing). Names
        that would land outside it, links that point out and device files are refused (tarfile's
        "data" filter), as they come from the sandbox.

        Raises:
            NotFoundError: there is nothing at `path`.
            tarfile.TarError: the archive holds something the filter refuses.
        """
        os.makedirs(local_dir, exist_ok=True)
        with tempfile.TemporaryFile() as f:
            for chunk in self.read_archive(path):
                f.write(chunk)
            f.seek(0)
            with tarfile.open(fileobj=f, mode="r") as tar:
                if not hasattr(tarfile, "data_filter"):  # before 3.9.17, 3.10.12, 3.11.4
                    raise CpuosError("download_dir needs a Python whose tarfile has filters "
                                     "(3.9.17, 3.10.12, 3.11.4 or later)")
                tar.extractall(os.fspath(local_dir), filter="data")

    def read_stream(self, path: str, chunk_size: int = CHUNK) -> Iterator[bytes]:
        """Yield the file's bytes in chunks of at most `chunk_size`.

        Reading to the end lets the Client reuse the connection; stopping early closes it.

        Raises:
            NotFoundError: there is no file at `path`.
            BadRequestError: `path` is a directory or invalid.
        """
        with self._client.open("GET", self._base, query={"path": path}) as resp:
            while True:
                chunk = resp.read1(chunk_size)
                if not chunk:
                    return
                yield chunk

    def read(self, path: str) -> bytes:
        """The whole file as bytes.

        Raises:
            NotFoundError, BadRequestError: as for `read_stream`.
        """
        return b"".join(self.read_stream(path))

    def read_text(self, path: str, encoding: str = "utf-8", errors: str = "strict") -> str:
        """The whole file decoded as text.

        Args:
            path: the file in the sandbox.
            encoding, errors: as for bytes.decode.

        Raises:
            NotFoundError, BadRequestError: as for `read_stream`.
            UnicodeDecodeError: the file is not valid in `encoding` (with errors="strict").
        """
        return self.read(path).decode(encoding, errors)

    def download(self, path: str, local_path: LocalPath, chunk_size: int = CHUNK) -> int:
        """Copy a sandbox file to a local path in chunks, through `<local_path>.part`.

        Returns:
            The number of bytes copied.

        Raises:
            NotFoundError, BadRequestError: as for `read_stream`.
            OSError: the local file cannot be written.
        """
        n = 0
        tmp = f"{os.fspath(local_path)}.part"
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

    def stat(self, path: str) -> Entry:
        """The Entry at `path`.

        Raises:
            NotFoundError: there is nothing at `path`.
        """
        return Entry.from_json(self._client.request("GET", self._base + "/stat", query={"path": path}))

    def exists(self, path: str) -> bool:
        """Whether anything exists at `path` (False as well when the sandbox is gone).

        Raises:
            ConflictError: the sandbox is not running.
        """
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def list(self, path: str, depth: int = 1) -> List[Entry]:
        """Entries under a directory.

        Args:
            path: the directory.
            depth: how many levels deep (1..16).

        Returns:
            The entries.

        Raises:
            NotFoundError: there is no directory at `path`.
            BadRequestError: the path is invalid or `depth` is out of range.
        """
        d = self._client.request("GET", self._base + "/list", query={"path": path, "depth": depth})
        return [Entry.from_json(e) for e in d.get("entries", [])]

    def mkdir(self, path: str, parents: bool = True, mode: Optional[Mode] = None,
              user: Optional[str] = None) -> Entry:
        """Create a directory.

        Args:
            path: the directory to create.
            parents: create missing parents too (and accept an existing directory).
            mode, user: as for `write`.

        Returns:
            Its Entry.

        Raises:
            BadRequestError: the path is invalid.
            CpuosError: the directory cannot be made (e.g. a file is in the way).
        """
        body: dict[str, Any] = {"path": path, "parents": parents}
        if mode is not None:
            body["mode"] = _mode(mode)
        if user is not None:
            body["user"] = user
        return Entry.from_json(self._client.request("POST", self._base + "/mkdir", json_body=body))

    def remove(self, path: str, recursive: bool = False) -> None:
        """Delete a file, or a directory (its contents too with `recursive=True`).

        Raises:
            NotFoundError: there is nothing at `path`.
            BadRequestError: the path is invalid.
            CpuosError: it cannot be removed (e.g. a directory that is not empty, without
                `recursive=True`).
        """
        self._client.request("DELETE", self._base, query={"path": path, "recursive": recursive or None})

    def rename(self, src: str, dst: str) -> Entry:
        """Move `src` to `dst`.

        Returns:
            The new Entry.

        Raises:
            NotFoundError: there is nothing at `src`.
            BadRequestError: a path is invalid.
        """
        d = self._client.request("POST", self._base + "/rename", json_body={"from": src, "to": dst})
        return Entry.from_json(d)

    def watch_dir(self, path: str, on_event: Optional[Callable[[FilesystemEvent], None]] = None,
                  recursive: bool = False,
                  on_exit: Optional[Callable[[Optional[BaseException]], None]] = None) -> WatchHandle:
        """Watch a directory (or a file) for changes: creates, writes, removes, renames, chmods.

        Returns once the watch is in place: a change made after it is seen. The watch lives
        through a pause and resume of the sandbox (an "overflow" event then says events may have
        been missed), and ends with `stop()` or when `path` itself is removed.

        Args:
            path: the directory to watch.
            on_event: called with each FilesystemEvent, from the watch's thread; without it,
                events queue for `get_new_events()`.
            recursive: also every directory under `path`, new ones included.
            on_exit: called once the watch ended, with the error that ended it or None.

        Raises:
            NotFoundError: there is nothing at `path`.
            BadRequestError: the path is invalid.
        """
        resp = self._client.open("GET", self._base + "/watch",
                                 query={"path": path, "recursive": recursive}, timeout=None)
        return WatchHandle(resp, path, on_event, on_exit)


@dataclasses.dataclass
class FilesystemEvent:
    """A change under a watched path.

    Attributes:
        type: "create", "write", "remove", "rename", "chmod", or "overflow" (events were lost:
            the watcher fell behind, or the sandbox was paused and resumed; look again).
        path: the absolute path that changed (the watched path for an overflow).
        name: `path` relative to the watched path.
        is_dir: whether it is a directory.
        reason: for an overflow, why.
    """

    type: str
    path: str
    name: str
    is_dir: bool = False
    reason: Optional[str] = None


class WatchHandle:
    """A watch from `Files.watch_dir`: a thread reads its events until `stop()`.

    With `on_event`, each event is passed to it (from that thread); without, they queue for
    `get_new_events()`.
    """

    def __init__(self, resp: Response, root: str, on_event: Optional[Callable[[FilesystemEvent], None]],
                 on_exit: Optional[Callable[[Optional[BaseException]], None]]) -> None:
        self._resp = resp
        self._root = root.rstrip("/") or "/"
        self._on_event = on_event
        self._on_exit = on_exit
        self._queue: queue.SimpleQueue[FilesystemEvent] = queue.SimpleQueue()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="cpuos-watch")
        self._thread.start()

    def _event(self, d: Mapping[str, Any]) -> FilesystemEvent:
        path = str(d.get("path") or "")
        name = path[len(self._root):].lstrip("/") if path.startswith(self._root) else path
        return FilesystemEvent(type=str(d.get("type")), path=path, name=name,
                               is_dir=bool(d.get("is_dir")), reason=d.get("reason"))

    def _run(self) -> None:
        error: Optional[BaseException] = None
        try:
            for line in self._resp:
                line = line.strip()
                if not line:
                    continue
                try:
                    d = json.loads(line)
                except ValueError as e:
                    raise CpuosError(f"the watch sent invalid JSON: {line[:200]!r}") from e
                ev = self._event(d)
                if self._on_event is not None:
                    self._on_event(ev)
                else:
                    self._queue.put(ev)
        except BaseException as e:  # a broken stream, or on_event's own
            if not self._stopped.is_set():
                error = e
        finally:
            self._resp.close()
            if self._on_exit is not None:
                self._on_exit(error)

    def get_new_events(self) -> List[FilesystemEvent]:
        """The events that came since the last call (without `on_event`)."""
        out = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except queue.Empty:
                return out

    def stop(self) -> None:
        """End the watch; returns once its thread is done."""
        self._stopped.set()
        self._resp.abort()
        self._thread.join(30)
