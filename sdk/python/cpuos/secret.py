"""Egress secrets: values the daemon keeps and puts into requests to the hosts they are bound
to, so code in a sandbox never holds them.

`Secret.set("OPENAI_API_KEY", "sk-...", hosts=["api.openai.com"])` registers one;
`Sandbox.create(secrets=["OPENAI_API_KEY"])` gives the sandbox `$OPENAI_API_KEY` holding a
placeholder, which the daemon's egress proxy replaces by the value in request headers sent to
api.openai.com over HTTPS (the guests trust the daemon's CA, so it can read the request),
and nowhere else."""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, List, Mapping, Optional

from ._client import DEFAULT_TIMEOUT, Client, path_segment, shared_client
from .errors import CpuosError


@dataclasses.dataclass
class Secret:
    """A secret as the daemon describes it: never its value.

    Attributes:
        name: its name, which is also the environment variable sandboxes see it under.
        hosts: the hosts its value goes to ("api.example.com", or "*.example.com" for every
            name under example.com).
        allow_http: it goes in plain HTTP requests too, not only over HTTPS to a server whose
            certificate names the host.
        placeholder: what sandboxes see instead of the value ("cpuos-secret-" and 32 hex).
        created_at, updated_at: when it was set first and last (RFC 3339).
        data: the whole object as the daemon sent it.
    """

    name: str
    hosts: List[str] = dataclasses.field(default_factory=list)
    allow_http: bool = False
    placeholder: Optional[str] = None
    created_at: Optional[str] = None
    updated_at: Optional[str] = None
    data: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)
    _client: Optional[Client] = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any], client: Optional[Client] = None) -> Secret:
        """The secret in an API answer; unknown fields are kept only in `data`.

        Raises:
            CpuosError: `d` is not an object with a "name" string.
        """
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str):
            raise CpuosError(f"cpuosd sent a secret without a name: {str(d)[:200]}")
        names = {f.name for f in dataclasses.fields(cls)} - {"data", "_client"}
        return cls(**{k: v for k, v in d.items() if k in names}, data=dict(d), _client=client)

    @classmethod
    def set(cls, name: str, value: str, hosts: Iterable[str], *, allow_http: bool = False,
            api_key: Optional[str] = None, api_url: Optional[str] = None,
            request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Secret:
        """Register a secret, or replace the value and hosts of one (it keeps its placeholder,
        and running sandboxes that hold it use the new value at once).

        Args:
            name: an environment variable's name (letters, digits, "_"; at most 64).
            value: 1 to 8192 printable ASCII bytes (it goes in a header).
            hosts: 1 to 16 host names or "*.domain" patterns; never "*" or a whole top-level
                domain ("*.com").
            allow_http: also in plain HTTP (default: HTTPS only).
            api_key, api_url: as for `Client` (default $CPUOS_API_KEY and $CPUOS_API_URL).
            request_timeout: seconds of socket inactivity before the call gives up.

        Returns:
            The Secret.

        Raises:
            BadRequestError: a bad name, value or host.
            AuthenticationError: a missing or wrong key.
            CpuosError: the daemon failed or cannot be reached.
        """
        if isinstance(hosts, str):
            raise TypeError("hosts is a list of names, not one string")
        client = shared_client(api_key, api_url, request_timeout)
        data = client.request("PUT", secret_path(name),
                              json_body={"value": value, "hosts": list(hosts),
                                         "allow_http": bool(allow_http)})
        return cls.from_json(data, client)

    @classmethod
    def list(cls, *, api_key: Optional[str] = None, api_url: Optional[str] = None,
             request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> List[Secret]:
        """Every secret of this key's account, by name.

        Raises:
            AuthenticationError, CpuosError: as for `set`.
        """
        client = shared_client(api_key, api_url, request_timeout)
        data = client.request("GET", "/v1/secrets") or {}
        return [cls.from_json(s, client) for s in data.get("secrets", [])]

    @classmethod
    def get(cls, name: str, *, api_key: Optional[str] = None, api_url: Optional[str] = None,
            request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Secret:
        """The secret called `name`.

        Raises:
            NotFoundError: no such secret in this key's account.
            AuthenticationError, CpuosError: as for `set`.
        """
        client = shared_client(api_key, api_url, request_timeout)
        return cls.from_json(client.request("GET", secret_path(name)), client)

    def delete(self) -> None:
        """Delete the secret: from now on no request gets its value, running sandboxes' too.

        Raises:
            NotFoundError: it is already gone.
            AuthenticationError, CpuosError: as for `set`.
        """
        client = self._client or shared_client()
        client.request("DELETE", secret_path(self.name))


def secret_path(name: str) -> str:
    """The API path of secret `name` (ValueError when empty or not one path segment)."""
    return "/v1/secrets/" + path_segment(name, "a secret name")
