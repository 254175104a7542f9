"""cpuos: Python SDK for cpuos sandboxes (QEMU microVMs for AI agents)."""

from ._client import Client, PoolStats
from .account import Price, Usage, usage
from .checkpoint import Checkpoint
from .errors import (AuthenticationError, BadRequestError, ConflictError, CpuosError,
                     NotFoundError, QuotaError, SandboxError, TimeoutError)
from .files import Entry, Files, FilesystemEvent, WatchHandle
from .interpreter import Answer, CodeInterpreter, ModelError, Step
from .process import ExecResult, Process
from .pty import Pty, PtyHandle, PtySize
from .run_code import CodeContext, Execution, ExecutionError, Logs, Result
from .secret import Secret
from .sandbox import Sandbox, SandboxPaginator

__version__ = "0.1.0"

__all__ = [
    "Sandbox", "SandboxPaginator", "Client", "PoolStats", "Files", "Entry", "FilesystemEvent", "WatchHandle", "Process", "ExecResult",
    "Pty", "PtyHandle", "PtySize",
    "Checkpoint", "Secret", "Usage", "Price", "usage",
    "Execution", "Result", "Logs", "ExecutionError", "CodeContext",
    "CodeInterpreter", "Answer", "Step",
    "CpuosError", "AuthenticationError", "NotFoundError", "BadRequestError", "ConflictError",
    "QuotaError", "SandboxError", "TimeoutError", "ModelError",
]
