"""Typed exceptions for cpuos API errors."""

from __future__ import annotations

import builtins
import json
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from .process import ExecResult


class CpuosError(Exception):
    """Base of every cpuos error: `.status` (HTTP), `.code` and `.message` from the API.

    Args:
        message: what went wrong, for people.
        status: the HTTP status, if the daemon answered one.
        code: the API's error code, e.g. "not_found".
    """

    def __init__(self, message: str, status: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self) -> str:
        parts = [str(p) for p in (self.status, self.code) if p is not None]
        return f"{self.message} ({' '.join(parts)})" if parts else self.message


class AuthenticationError(CpuosError):
    """401: missing or wrong API key."""


class NotFoundError(CpuosError):
    """404: unknown sandbox, process, file or route (another account's sandbox too)."""


class BadRequestError(CpuosError):
    """400, 413 or 422: the request was malformed, too large or invalid."""


class ConflictError(CpuosError):
    """409: the sandbox is not running (stopped), or a checkpoint name is taken."""


class QuotaError(CpuosError):
    """429: the account has reached its running sandbox limit."""


class SandboxError(CpuosError):
    """500 or 503: the VM failed to start, died during the call, or the daemon failed."""


class TimeoutError(CpuosError, builtins.TimeoutError):
    """A command's timeout killed it (`.result` holds the partial result), or a wait timed out.

    Also a builtins.TimeoutError, so `except TimeoutError` catches it either way.

    Args:
        message: what timed out.
        result: the partial ExecResult of a command that its timeout killed, else None.
        status: the HTTP status, if any.
        code: the API's error code, if any.
    """

    def __init__(self, message: str, result: Optional[ExecResult] = None,
                 status: Optional[int] = None, code: Optional[str] = None) -> None:
        super().__init__(message, status=status, code=code)
        self.result = result

    def __str__(self) -> str:
        return CpuosError.__str__(self)


_BY_STATUS: dict[int, type[CpuosError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    404: NotFoundError,
    409: ConflictError,
    413: BadRequestError,
    422: BadRequestError,
    429: QuotaError,
    500: SandboxError,
    503: SandboxError,
}


def error_from_response(status: int, body: bytes) -> CpuosError:
    """Build the exception for an error status and its raw body.

    Args:
        status: the HTTP status (400 or more).
        body: the raw answer, ideally `{"error": {"code": ..., "message": ...}}`.

    Returns:
        The CpuosError subclass for `status` (BadRequestError for another 4xx, SandboxError for
        another 5xx), carrying the API's code and message, or the body's text.
    """
    code: Optional[str] = None
    message: Optional[str] = None
    try:
        err = json.loads(body.decode("utf-8", "replace")).get("error") or {}
        code, message = err.get("code"), err.get("message")
    except (ValueError, AttributeError):
        pass
    if not message:
        text = body.decode("utf-8", "replace").strip()[:500] if body else ""
        message = text or f"HTTP {status}"
    cls = _BY_STATUS.get(status)
    if cls is None:
        cls = BadRequestError if 400 <= status < 500 else SandboxError if status >= 500 else CpuosError
    return cls(message, status=status, code=code)
