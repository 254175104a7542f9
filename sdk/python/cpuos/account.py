"""What an account has used over a time range, and what it costs (`cpuos.usage`)."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any, Mapping, Optional, Union

from ._client import DEFAULT_TIMEOUT, shared_client
from .errors import CpuosError

#: A point in time: an RFC 3339 string, or a datetime (a naive one is local time).
Time = Union[str, datetime.datetime]


@dataclasses.dataclass(frozen=True)
class Price:
    """The price the cost is computed with: `usd_per_hour` for a sandbox of `vcpus` and
    `memory_gib` (e.g. $0.11 for 2 vCPUs and 4 GiB)."""

    usd_per_hour: float = 0.0
    vcpus: float = 0.0
    memory_gib: float = 0.0


@dataclasses.dataclass(frozen=True)
class Usage:
    """An account's use of sandboxes from `from_` to `to`.

    Attributes:
        account: the account.
        from_, to: the range (RFC 3339; the API's "from" and "to").
        sandboxes: how many sandboxes ran in it.
        running_seconds: seconds sandboxes were running, added up.
        vcpu_seconds: vCPUs times running seconds.
        gib_seconds: GiB of memory times running seconds.
        paused_gib_seconds: GiB kept for paused sandboxes times paused seconds.
        cost_usd: what that costs at `price`.
        price: the price used.
        data: the whole answer as the daemon sent it.
    """

    account: Optional[str] = None
    from_: Optional[str] = None
    to: Optional[str] = None
    sandboxes: int = 0
    running_seconds: float = 0.0
    vcpu_seconds: float = 0.0
    gib_seconds: float = 0.0
    paused_gib_seconds: float = 0.0
    cost_usd: float = 0.0
    price: Price = dataclasses.field(default_factory=Price)
    data: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Usage:
        """The usage in an API answer; unknown fields are kept only in `data`, nulls are 0.

        Raises:
            CpuosError: `d` is not an object, or a number field holds something else.
        """
        if not isinstance(d, Mapping):
            raise CpuosError(f"cpuosd sent a usage answer that is not an object: {str(d)[:200]}")
        given = d.get("price")
        price: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
        return cls(account=d.get("account"), from_=d.get("from"), to=d.get("to"),
                   sandboxes=int(_number(d, "sandboxes")),
                   running_seconds=_number(d, "running_seconds"),
                   vcpu_seconds=_number(d, "vcpu_seconds"), gib_seconds=_number(d, "gib_seconds"),
                   paused_gib_seconds=_number(d, "paused_gib_seconds"),
                   cost_usd=_number(d, "cost_usd"),
                   price=Price(usd_per_hour=_number(price, "usd_per_hour"),
                               vcpus=_number(price, "vcpus"),
                               memory_gib=_number(price, "memory_gib")),
                   data=dict(d))


def usage(from_: Optional[Time] = None, to: Optional[Time] = None, key: Optional[str] = None, *,
          api_key: Optional[str] = None, api_url: Optional[str] = None,
          request_timeout: Optional[float] = DEFAULT_TIMEOUT) -> Usage:
    """What this key's account used from `from_` to `to`, and its cost.

    Args:
        from_: the start (default: 30 days ago).
        to: the end (default: now).
        key: only what this key id ("key_...") started.
        api_key, api_url: as for `Client` (default $CPUOS_API_KEY and $CPUOS_API_URL).
        request_timeout: seconds of socket inactivity before the call gives up.

    Returns:
        The Usage.

    Raises:
        BadRequestError: a time that is not RFC 3339, or `from_` after `to`.
        AuthenticationError: a missing or wrong key.
        CpuosError: the daemon failed or cannot be reached.
        TypeError: a time that is neither a string nor a datetime.
    """
    client = shared_client(api_key, api_url, request_timeout)
    query = {"from": rfc3339(from_), "to": rfc3339(to), "key": key}
    return Usage.from_json(client.request("GET", "/v1/usage", query=query) or {})


def rfc3339(value: Optional[Time]) -> Optional[str]:
    """A time for the API: strings as given, datetimes in UTC as "2026-11-29T09:41:58Z".

    Raises:
        TypeError: `value` is neither None, a string nor a datetime.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, datetime.datetime):
        utc = value.astimezone(datetime.timezone.utc)
        return utc.strftime("%Y-%m-%dT%H:%M:%SZ")
    raise TypeError("a time is an RFC 3339 string or a datetime")


def _number(d: Mapping[str, Any], key: str) -> float:
    v = d.get(key)
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise CpuosError(f"cpuosd sent a usage answer with {key} = {v!r}, not a number")
    return float(v)
