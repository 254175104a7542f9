/**
 * Typed errors for cpuos API answers. Every error the SDK throws is a
 * CpuosError; the subclass says what kind, `status` and `code` are the
 * API's (`{"error": {"code", "message"}}`), `message` is for people.
 */
import type { ExecResult } from "./process.js";

export interface CpuosErrorOptions {
  status?: number;
  code?: string;
  cause?: unknown;
}

export class CpuosError extends Error {
  /** The HTTP status, if the daemon answered one. */
  readonly status?: number;
  /** The API's error code, e.g. "not_found". */
  readonly code?: string;

  constructor(message: string, options: CpuosErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.status = options.status;
    this.code = options.code;
  }
}

/** 401: a missing or wrong API key. */
export class AuthenticationError extends CpuosError {}
/** 404: no such sandbox, process, file, checkpoint or route (another account's too). */
export class NotFoundError extends CpuosError {}
/** 400, 413 or 422: the request was malformed, too large or invalid. */
export class BadRequestError extends CpuosError {}
/** 409: the sandbox is not running, or a checkpoint's name is taken. */
export class ConflictError extends CpuosError {}
/** 429: past the account's limits (sandboxes, vCPUs, memory), or too many operations at once. */
export class QuotaError extends CpuosError {}
/** 500 or 503: the VM failed to start or died during the call, or the daemon failed. */
export class SandboxError extends CpuosError {}

/**
 * A command's own timeout killed it (`result` holds what it wrote), a
 * wait ran out, or the daemon did not answer in time.
 */
export class TimeoutError extends CpuosError {
  readonly result?: ExecResult;

  constructor(message: string, options: CpuosErrorOptions & { result?: ExecResult } = {}) {
    super(message, options);
    this.result = options.result;
  }
}

const BY_STATUS: Record<number, new (m: string, o: CpuosErrorOptions) => CpuosError> = {
  400: BadRequestError,
  401: AuthenticationError,
  403: AuthenticationError,
  404: NotFoundError,
  409: ConflictError,
  413: BadRequestError,
  422: BadRequestError,
  429: QuotaError,
  500: SandboxError,
  503: SandboxError,
  504: TimeoutError,
};

/** The error for an answer's status and body (read as text, at most 64 KiB). */
export function errorFromAnswer(status: number, body: string): CpuosError {
  let code: string | undefined;
  let message: string | undefined;
  try {
    const err = (JSON.parse(body) as { error?: { code?: unknown; message?: unknown } }).error;
    if (typeof err?.code === "string") code = err.code;
    if (typeof err?.message === "string") message = err.message;
  } catch {
    // not JSON: the text itself is the message
  }
  if (!message) message = body.trim().slice(0, 500) || `HTTP ${status}`;
  const Cls = BY_STATUS[status] ?? (status >= 400 && status < 500 ? BadRequestError : SandboxError);
  return new Cls(`${message} (${status}${code ? " " + code : ""})`, { status, code });
}
