"""Typed exceptions for cpuos API errors."""

import builtins
import json


class CpuosError(Exception):
    """Base of every cpuos error: `.status` (HTTP), `.code` and `.message` from the API."""

    def __init__(self, message, status=None, code=None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code

    def __str__(self):
        parts = [str(p) for p in (self.status, self.code) if p is not None]
        return f"{self.message} ({' '.join(parts)})" if parts else self.message


class AuthenticationError(CpuosError):
    """401: missing or wrong API key."""


class NotFoundError(CpuosError):
    """404: unknown sandbox, process, file or route (another account's sandbox too)."""


class BadRequestError(CpuosError):
    """400, 413 or 422: the request was malformed, too large or invalid."""


class ConflictError(CpuosError):
    """409: the sandbox is not running."""


class QuotaError(CpuosError):
    """429: the account has reached its running sandbox limit."""


class SandboxError(CpuosError):
    """500 or 503: the VM failed to start, died during the call, or the daemon failed."""


class TimeoutError(CpuosError, builtins.TimeoutError):
    """A command's timeout killed it (`.result` holds the partial result), or a wait timed out."""

    def __init__(self, message, result=None, status=None, code=None):
        super().__init__(message, status=status, code=code)
        self.result = result

    def __str__(self):
        return CpuosError.__str__(self)


_BY_STATUS = {
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


def error_from_response(status, body):
    """Build the exception for an error status and its raw body."""
    code, message = None, None
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
