/**
 * The connection to cpuosd: its URL and key, one request helper over
 * Node's fetch, durations, and the NDJSON reader of output streams.
 */
import { CpuosError, TimeoutError, errorFromAnswer } from "./errors.js";

export const DEFAULT_API_URL = "http://127.0.0.1:7070";
/** A call that names no timeout of its own gives up after this long. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 600_000;
const ERROR_BODY_MAX = 64 * 1024;
/** No output line the daemon sends is this long (it caps each chunk at 64 KiB). */
const LINE_MAX = 4 * 1024 * 1024;

/** "90s", "30m", "2h", "1h30m", or a number of seconds. */
export type Duration = string | number;

/** Where the daemon is and who calls it; each falls back to its environment variable. */
export interface ConnectionOptions {
  /** The API key; default $CPUOS_API_KEY. */
  apiKey?: string;
  /** The daemon's URL; default $CPUOS_API_URL, else http://127.0.0.1:7070. */
  apiUrl?: string;
  /** Give up a call after this many milliseconds (default 600000) unless it names its own. */
  requestTimeoutMs?: number;
}

/** Options every call takes. */
export interface CallOptions {
  /** Aborting it ends the call: the request is cancelled, and the promise rejects with its reason. */
  signal?: AbortSignal;
}

export type Query = Record<string, string | number | boolean | undefined | null>;

export interface RequestOptions extends CallOptions {
  query?: Query;
  json?: unknown;
  body?: Uint8Array | string | ReadableStream<Uint8Array>;
  /** null: no limit but the caller's signal. */
  timeoutMs?: number | null;
}

export class Client {
  readonly apiUrl: string;
  readonly apiKey?: string;
  readonly requestTimeoutMs: number;

  constructor(options: ConnectionOptions = {}) {
    const url = options.apiUrl ?? process.env.CPUOS_API_URL ?? DEFAULT_API_URL;
    if (!/^https?:\/\//.test(url))
      throw new CpuosError(`the API URL must be http:// or https://, not '${url}' ` +
                           "(the TypeScript SDK speaks TCP only; cpuosd listens on 127.0.0.1:7070)");
    this.apiUrl = url.replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? process.env.CPUOS_API_KEY ?? undefined;
    this.requestTimeoutMs = options.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  }

  /** Send a request; a 2xx answer comes back unread, any other status is thrown as its error. */
  async request(method: string, path: string, options: RequestOptions = {}): Promise<Response> {
    const { signal } = options;
    signal?.throwIfAborted();
    let url = this.apiUrl + path;
    const pairs = Object.entries(options.query ?? {}).filter(([, v]) => v !== undefined && v !== null);
    if (pairs.length)
      url += "?" + pairs.map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(String(v))}`).join("&");
    const headers: Record<string, string> = { Accept: "application/json" };
    if (this.apiKey) headers.Authorization = `Bearer ${this.apiKey}`;
    let body: Uint8Array | string | ReadableStream<Uint8Array> | undefined;
    if (options.json !== undefined) {
      body = JSON.stringify(options.json);
      headers["Content-Type"] = "application/json";
    } else if (options.body !== undefined) {
      body = options.body;
      headers["Content-Type"] = "application/octet-stream";
    }
    const limit = options.timeoutMs === undefined ? this.requestTimeoutMs : options.timeoutMs;
    const timer = limit === null ? undefined : AbortSignal.timeout(limit);
    const signals = [signal, timer].filter((s): s is AbortSignal => s !== undefined);
    const init: RequestInit & { duplex?: "half" } = {
      method, headers, body,
      signal: signals.length > 1 ? AbortSignal.any(signals) : signals[0],
    };
    if (body instanceof ReadableStream) init.duplex = "half";
    let resp: Response;
    try {
      resp = await fetch(url, init);
    } catch (e) {
      throw this.failure(e, signal, timer, limit, method, path);
    }
    if (resp.ok) return resp;
    let text = "";
    try {
      text = await readCapped(resp, ERROR_BODY_MAX);
    } catch {
      // the status says enough
    }
    throw errorFromAnswer(resp.status, text);
  }

  /** A request whose answer is JSON (or empty: undefined). */
  async json<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const resp = await this.request(method, path, options);
    const text = await this.read(resp, options.signal);
    if (!text) return undefined as T;
    try {
      return JSON.parse(text) as T;
    } catch (e) {
      throw new CpuosError(`cpuosd sent invalid JSON for ${method} ${path}`, { cause: e });
    }
  }

  /** An answer's text, with failures as CpuosErrors (or the caller's abort reason). */
  async read(resp: Response, signal?: AbortSignal): Promise<string> {
    try {
      return await resp.text();
    } catch (e) {
      if (signal?.aborted) throw signal.reason;
      throw new CpuosError(`the answer from cpuosd broke off: ${describe(e)}`, { cause: e });
    }
  }

  /** What a fetch that threw becomes: the caller's abort as is, our timeout, or unreachable. */
  failure(e: unknown, signal: AbortSignal | undefined, timer: AbortSignal | undefined,
          limit: number | null, method: string, path: string): unknown {
    if (signal?.aborted) return signal.reason;
    if (timer?.aborted)
      return new TimeoutError(`no answer from cpuosd to ${method} ${path} within ${limit} ms`, { cause: e });
    return new CpuosError(`cannot reach cpuosd at ${this.apiUrl}: ${describe(e)}`, { cause: e });
  }
}

function describe(e: unknown): string {
  const cause = (e as { cause?: { message?: string; code?: string } })?.cause;
  const msg = e instanceof Error ? e.message : String(e);
  return cause?.code ? `${msg} (${cause.code})` : cause?.message ? `${msg} (${cause.message})` : msg;
}

async function readCapped(resp: Response, cap: number): Promise<string> {
  if (!resp.body) return "";
  const reader = resp.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  try {
    while (size < cap) {
      const { done, value } = await reader.read();
      if (done) break;
      parts.push(value);
      size += value.length;
    }
  } finally {
    reader.cancel().catch(() => {});
  }
  return new TextDecoder().decode(Buffer.concat(parts).subarray(0, cap));
}

/** The JSON objects of an NDJSON answer, one per line, as they come. */
export async function* ndjson(resp: Response, what: string,
                              signal?: AbortSignal): AsyncGenerator<Record<string, unknown>> {
  if (!resp.body) return;
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  try {
    for (;;) {
      let chunk: { done: boolean; value?: string };
      try {
        chunk = await reader.read();
      } catch (e) {
        if (signal?.aborted) throw signal.reason;
        throw new CpuosError(`the output stream of ${what} broke off: ${describe(e)}`, { cause: e });
      }
      if (chunk.done) break;
      pending += chunk.value ?? "";
      let nl: number;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const line = pending.slice(0, nl).trim();
        pending = pending.slice(nl + 1);
        if (line) yield parseLine(line, what);
      }
      if (pending.length > LINE_MAX)
        throw new CpuosError(`the output stream of ${what} sent a line over ${LINE_MAX} bytes`);
    }
    if (pending.trim()) yield parseLine(pending.trim(), what);
  } finally {
    reader.cancel().catch(() => {});
  }
}

function parseLine(line: string, what: string): Record<string, unknown> {
  let v: unknown;
  try {
    v = JSON.parse(line);
  } catch {
    throw new CpuosError(`the output stream of ${what} sent invalid JSON: ${line.slice(0, 200)}`);
  }
  if (typeof v !== "object" || v === null || Array.isArray(v))
    throw new CpuosError(`the output stream of ${what} sent ${line.slice(0, 200)}, not an object`);
  return v as Record<string, unknown>;
}

const UNITS: Record<string, number> = { s: 1, m: 60, h: 3600 };

/** A duration in seconds, or undefined for one the daemon will judge (and refuse with a 422). */
export function seconds(d: Duration): number | undefined {
  if (typeof d === "number") return Number.isInteger(d) && d >= 1 ? d : undefined;
  if (/^\d+$/.test(d)) return Number(d) >= 1 ? Number(d) : undefined;
  const parts = [...d.matchAll(/(\d+)([smh])/g)];
  if (!parts.length || parts.map((p) => p[0]).join("") !== d) return undefined;
  return parts.reduce((sum, p) => sum + Number(p[1]) * UNITS[p[2]], 0);
}
