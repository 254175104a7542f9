"""Checkpoints: named, stored copies of a sandbox's memory and disk to start new sandboxes from.

`Sandbox.checkpoint(name)` makes one; `Sandbox.create(checkpoint=...)` starts a sandbox from one.
A checkpoint outlives its sandbox until it is deleted."""

from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Optional

from ._client import DEFAULT_TIMEOUT, Client, path_segment, shared_client
from .errors import CpuosError


@dataclasses.dataclass
class Checkpoint:
    """A checkpoint of a sandbox, as the daemon describes it.

    Attributes:
        id: its id, e.g. "ckp_3f9a0c1d2e4b5a69".
        name: the name it was given (unique in the account), e.g. "step-3".
        sandbox_id: the sandbox it was taken of.
        template: that sandbox's template, which sandboxes started from it get.
        vcpus, memory_mb, disk_mb: that sandbox's size.
        size_bytes: the space it takes on the daemon's disk.
        created_at: when it was taken (RFC 3339).
        stored: whether it is also in the daemon's object store, so a sandbox starts from it even
            where the host lost its copy (daemons with `--s3-endpoint`).
        data: the whole object as the daemon sent it.
    """

    id: str
    name: Optional[str] = None
    sandbox_id: Optional[str] = None
    template: Optional[str] = None
    vcpus: Optional[int] = None
    memory_mb: Optional[int] = None
    disk_mb: Optional[int] = None
    size_bytes: Optional[int] = None
    created_at: Optional[str] = None
    stored: Optional[bool] = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    _client: Optional[Client] = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: Optional[Client] = None) -> Checkpoint:
        """The checkpoint in an API answer; unknown fields are kept only in `data`.

        Args:
            d: the decoded JSON object (it must have "id").
            client: the Client that `delete` uses (default: the shared one from the environment).

        Returns:
            The Checkpoint.

        Raises:
            CpuosError: `d` is not an object with an "id" string.
        """
        if not isinstance(d, Mapping) or not isinstance(d.get("id"), str):
            raise CpuosError(f"cpuosd sent a checkpoint without an id: {str(d)[:200]}")
        names = {f.name for f in dataclasses.fields(cls)} - {"data", "_client"}
        return cls(**{k: v for k, v in d.items() if k in names}, data=dict(d), _client=client)

    @classmethod
    def list(cls, *, api_key: Optional[str] = None, api_url: Optional[str] = None,
             request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> List[Checkpoint]:
        """Every checkpoint of this key's account, newest first.

        Args:
            api_key, api_url: as for `Client` (default $CPUOS_API_KEY and $CPUOS_API_URL).
            request_timeout: seconds of socket inactivity before the call gives up.

        Returns:
            A list of Checkpoint.

        Raises:
            AuthenticationError: a missing or wrong key.
            CpuosError: the daemon failed or cannot be reached.
        """
        client = shared_client(api_key, api_url, request_timeout)
        data = client.request("GET", "/v1/checkpoints") or {}
        return [cls.from_json(c, client) for c in data.get("checkpoints", [])]

    @classmethod
    def get(cls, id_or_name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None,
            request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Checkpoint:
        """The checkpoint with this id ("ckp_...") or name.

        Args:
            id_or_name: its id or its name.
            api_key, api_url, request_timeout: as for `list`.

        Returns:
            The Checkpoint.

        Raises:
            NotFoundError: no such checkpoint in this key's account.
            ValueError: an empty `id_or_name`.
            AuthenticationError, CpuosError: as for `list`.
        """
        client = shared_client(api_key, api_url, request_timeout)
        return cls.from_json(client.request("GET", checkpoint_path(id_or_name)), client)

    def delete(self) -> None:
        """Delete the checkpoint; sandboxes started from it go on.

        Raises:
            NotFoundError: it is already gone.
            AuthenticationError, CpuosError: as for `list`.
        """
        client = self._client or shared_client()
        client.request("DELETE", checkpoint_path(self.id))


def checkpoint_path(id_or_name: str) -> str:
    """The API path of a checkpoint, its id or name percent-encoded as one path segment.

    Raises:
        ValueError: an empty id or name.
    """
    return "/v1/checkpoints/" + path_segment(id_or_name, "a checkpoint id or name")

