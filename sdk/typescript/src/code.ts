/**
 * The code interpreter: `sandbox.runCode` in a stateful kernel, its
 * Execution with rich results (text, HTML, PNG figures, ...), and the
 * kernels' contexts (docs/api.md, "Code").
 */
import { type CallOptions, type Client, type Duration, ndjson, seconds } from "./client.js";
import { CpuosError } from "./errors.js";
import { Tail } from "./process.js";

const TEXT_FORMATS = ["text", "html", "markdown", "svg", "latex", "javascript"] as const;
const BINARY_FORMATS = ["png", "jpeg", "pdf"] as const;
const DEFAULT_TIMEOUT = "5m"; // the daemon's, for a call that names none

/** The exception a call's code raised; the context lives on. Data, not a thrown error. */
export interface ExecutionError {
  /** Its class, e.g. "ZeroDivisionError" ("KernelDied" when the kernel died, "ExitStatus" for bash). */
  name: string;
  /** Its message, e.g. "division by zero". */
  value: string;
  /** The formatted traceback ("" when there is none). */
  traceback: string;
}

/** What a call printed, as the chunks it came in (one chunk each without streaming). */
export interface Logs {
  stdout: string[];
  stderr: string[];
}

/** A context: one kernel, whose variables, imports and working directory persist between calls. */
export interface CodeContext {
  /** "default" and "bash" are the languages' own. */
  id: string;
  language: string;
  cwd: string;
  user: string;
  /** "idle", "busy" (a call runs in it) or "exited" (the next call starts a new kernel). */
  state: string;
  /** The kernel's pid in the processes API, or null once exited. */
  pid: number | null;
}

export interface RunCodeOptions extends CallOptions {
  /** "python" or "bash" (default the context's, else "python"). */
  language?: string;
  /** A context id or CodeContext (default "default" for python, "bash" for bash; created on first use). */
  context?: string | CodeContext;
  /** Interrupt the code after this long ("2m" or seconds; default 5m, at most 24h); the context lives on. */
  timeout?: Duration;
  /** The formats of matplotlib figures, e.g. ["png", "svg"] (default ["png"]). */
  figureFormats?: readonly string[];
  /** Each chunk of standard output as the code prints it (any callback streams the answer). */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
  /** Each rich result as it comes (a figure when shown, ...). */
  onResult?: (result: Result) => void;
  /** The code's exception, when it raises. */
  onError?: (error: ExecutionError) => void;
}

export interface CodeContextOptions extends CallOptions {
  /** "python" (the default) or "bash". */
  language?: string;
  /** Its working directory (default /work, or the user's home where there is none). */
  cwd?: string;
  /** 1 to 64 of A-Z a-z 0-9 . _ - (default "ctx_" and 8 hex digits). */
  id?: string;
  /** "user" (the default) or "root". */
  user?: string;
}

/**
 * One rich result of a call: a figure, what `display(obj)` was given, or
 * the value of the code's last line (`isMainResult`). Each field is one
 * representation of the object, undefined when it has not that one.
 */
export class Result {
  /** Its `repr`. */
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  latex?: string;
  javascript?: string;
  /** A JSON representation (any JSON value). */
  json?: unknown;
  /** Images and documents, decoded from the API's base64. */
  png?: Uint8Array;
  jpeg?: Uint8Array;
  pdf?: Uint8Array;
  /** Whether it is the value of the code's last line. */
  isMainResult: boolean;
  /** Representations this SDK does not know, as the API sent them. */
  extra: Record<string, unknown> = {};

  /** A result as the API sends it; throws a CpuosError for a representation of the wrong type. */
  constructor(d: Record<string, unknown>) {
    this.isMainResult = d.is_main_result === true;
    for (const [key, value] of Object.entries(d)) {
      if (value === null || value === undefined || key === "type" || key === "is_main_result") continue;
      if (key === "json") this.json = value;
      else if ((TEXT_FORMATS as readonly string[]).includes(key)) {
        if (typeof value !== "string") throw new CpuosError(`a result's ${key} is a ${typeof value}, not text`);
        this[key as (typeof TEXT_FORMATS)[number]] = value;
      } else if ((BINARY_FORMATS as readonly string[]).includes(key)) {
        this[key as (typeof BINARY_FORMATS)[number]] = decodeBase64(value, key);
      } else this.extra[key] = value;
    }
  }

  /** The names of the representations it has ("text", "html", "png", ...), then those in `extra`. */
  formats(): string[] {
    const known = [...TEXT_FORMATS, "json" as const, ...BINARY_FORMATS].filter((f) => this[f] !== undefined);
    return [...known, ...Object.keys(this.extra)];
  }
}

/** What `runCode` did. An exception in the code is `error`, a timeout `timedOut`: neither is thrown. */
export class Execution {
  /**
   * The rich results in the order they came: what `display` was given and
   * the figures `plt.show()` showed, then the main result, then the figures
   * still open.
   */
  results: Result[] = [];
  /** The output (each stream's last 1 MiB). */
  logs: Logs = { stdout: [], stderr: [] };
  error: ExecutionError | null = null;
  /** The id of the context it ran in. */
  context: string | null = null;
  language: string | null = null;
  /** The context's count of calls, this one included. */
  executionCount: number | null = null;
  timedOut = false;
  /** The context's kernel had died and was started anew for this call: its state is gone. */
  kernelRestarted = false;
  restartReason: string | null = null;
  /** Results were left out (past 16 MiB in all, or 8 MiB one). */
  resultsTruncated = false;
  stdoutTruncated = false;
  stderrTruncated = false;
  durationMs: number | null = null;

  /** The main result's text (the value of the code's last line), or undefined. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }

  /** The execution of a whole (not streamed) answer. */
  static fromJson(d: Record<string, unknown>): Execution {
    const ex = new Execution();
    if (d.results !== undefined && d.results !== null) {
      if (!Array.isArray(d.results) || !d.results.every((r) => typeof r === "object" && r !== null))
        throw new CpuosError("cpuosd sent results that are not a list of objects");
      ex.results = d.results.map((r: Record<string, unknown>) => new Result(r));
    }
    for (const which of ["stdout", "stderr"] as const)
      if (typeof d[which] === "string" && d[which]) ex.logs[which].push(d[which]);
    if (typeof d.error === "object" && d.error !== null) ex.error = executionError(d.error as Record<string, unknown>);
    ex.end(d);
    return ex;
  }

  /** Take the fields of an answer or of a stream's "end" line. */
  private end(d: Record<string, unknown>): void {
    const str = (v: unknown) => (typeof v === "string" ? v : null);
    const num = (v: unknown) => (typeof v === "number" ? v : null);
    this.context = str(d.context);
    this.language = str(d.language);
    this.executionCount = num(d.execution_count);
    this.restartReason = str(d.restart_reason);
    this.durationMs = num(d.duration_ms);
    this.timedOut ||= d.timed_out === true;
    this.kernelRestarted ||= d.kernel_restarted === true;
    this.resultsTruncated ||= d.results_truncated === true;
    this.stdoutTruncated ||= d.stdout_truncated === true;
    this.stderrTruncated ||= d.stderr_truncated === true;
  }

  /** The execution of a streamed answer, calling back per line as they come. */
  static async fromStream(resp: Response, options: RunCodeOptions): Promise<Execution> {
    const ex = new Execution();
    const out = new Tail(), err = new Tail();
    for await (const ev of ndjson(resp, "runCode", options.signal)) {
      if (ev.type === "stdout" || ev.type === "stderr") {
        const data = typeof ev.data === "string" ? ev.data : "";
        if (!data) continue;
        (ev.type === "stdout" ? out : err).add(data);
        (ev.type === "stdout" ? options.onStdout : options.onStderr)?.(data);
      } else if (ev.type === "result") {
        const result = new Result(ev);
        ex.results.push(result);
        options.onResult?.(result);
      } else if (ev.type === "error") {
        ex.error = executionError(ev);
        options.onError?.(ex.error);
      } else if (ev.type === "end") {
        ex.logs = { stdout: out.chunks(), stderr: err.chunks() };
        ex.stdoutTruncated = out.truncated;
        ex.stderrTruncated = err.truncated;
        ex.end(ev);
        return ex;
      } // other types are for later daemons
    }
    throw new CpuosError("the runCode output stream ended without its end line " +
                         "(the sandbox died or broke the protocol)");
  }
}

/** `sandbox.runCode`: POST .../code, whole or (with a callback) streamed. */
export async function runCode(client: Client, base: string, code: string,
                              options: RunCodeOptions = {}): Promise<Execution> {
  if (typeof code !== "string") throw new TypeError(`code is a string, not ${typeof code}`);
  if (typeof options.figureFormats === "string")
    throw new TypeError('figureFormats is a list of names, e.g. ["png", "svg"], not one string');
  const body: Record<string, unknown> = {
    code, language: options.language, timeout: options.timeout,
    context: options.context === undefined ? undefined : contextId(options.context),
    figure_formats: options.figureFormats === undefined ? undefined : [...options.figureFormats],
  };
  const timeoutMs = ((seconds(options.timeout ?? DEFAULT_TIMEOUT) ?? 300) + 60) * 1000;
  if (!options.onStdout && !options.onStderr && !options.onResult && !options.onError)
    return Execution.fromJson(await client.json<Record<string, unknown> | undefined>("POST", base + "/code", {
      json: body, signal: options.signal, timeoutMs,
    }) ?? {});
  body.stream = true;
  const resp = await client.request("POST", base + "/code", { json: body, signal: options.signal, timeoutMs });
  return Execution.fromStream(resp, options);
}

/** A context in an API answer; a CpuosError without an id. */
export function codeContext(d: unknown): CodeContext {
  const c = d as Record<string, unknown> | null;
  if (typeof c !== "object" || c === null || typeof c.id !== "string" || !c.id)
    throw new CpuosError(`cpuosd sent a code context without an id: ${JSON.stringify(d)?.slice(0, 200)}`);
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  return { id: c.id, language: str(c.language), cwd: str(c.cwd), user: str(c.user), state: str(c.state),
           pid: typeof c.pid === "number" ? c.pid : null };
}

/** A context's id as one path segment. */
export function contextSegment(ctx: string | CodeContext): string {
  const id = contextId(ctx);
  if (!id) throw new TypeError("an empty context id");
  return encodeURIComponent(id);
}

function contextId(ctx: string | CodeContext): string {
  if (typeof ctx === "string") return ctx;
  if (typeof ctx?.id === "string") return ctx.id;
  throw new TypeError(`a context is an id or a CodeContext, not ${typeof ctx}`);
}

function executionError(d: Record<string, unknown>): ExecutionError {
  const str = (v: unknown) => (typeof v === "string" ? v : "");
  return { name: str(d.name), value: str(d.value), traceback: str(d.traceback) };
}

function decodeBase64(value: unknown, what: string): Uint8Array {
  if (typeof value !== "string") throw new CpuosError(`a result's ${what} is a ${typeof value}, not base64 text`);
  const s = value.replace(/\s+/g, ""); // line breaks are allowed, nothing else outside the alphabet
  if (s.length % 4 !== 0 || !/^[A-Za-z0-9+/]*={0,2}$/.test(s))
    throw new CpuosError(`a result's ${what} is not valid base64: ${value.slice(0, 40)}`);
  return new Uint8Array(Buffer.from(s, "base64"));
}
