/**
 * Commands' results and background processes: a process's output as an
 * async iterable or two byte streams, its stdin, signals and wait.
 */
import { type CallOptions, type Client, type Duration, ndjson, seconds } from "./client.js";
import { CpuosError, NotFoundError, TimeoutError } from "./errors.js";

/** What a command ended with. `exitCode` is null when a signal (or its timeout) ended it. */
export interface ExecResult {
  exitCode: number | null;
  /** Its output: the last 1 MiB when `stdoutTruncated`. */
  stdout: string;
  stderr: string;
  /** The signal that ended it, or null. */
  signal: number | null;
  /** Whether its own timeout killed it. */
  timedOut: boolean;
  stdoutTruncated: boolean;
  stderrTruncated: boolean;
  /** How long it ran, when the daemon says. */
  durationMs: number | null;
}

export type OutputEvent = { type: "stdout" | "stderr"; data: string };

export interface ProcessData {
  pid: number;
  os_pid?: number | null;
  cmd?: string;
  state?: string;
  exit_code?: number | null;
  signal?: number | null;
  timed_out?: boolean;
}

const num = (v: unknown): number | null => (typeof v === "number" ? v : null);

export function resultFromJson(d: Record<string, unknown>): ExecResult {
  return {
    exitCode: num(d.exit_code),
    stdout: typeof d.stdout === "string" ? d.stdout : "",
    stderr: typeof d.stderr === "string" ? d.stderr : "",
    signal: num(d.signal),
    timedOut: d.timed_out === true,
    stdoutTruncated: d.stdout_truncated === true,
    stderrTruncated: d.stderr_truncated === true,
    durationMs: num(d.duration_ms),
  };
}

/** The last `cap` characters of a stream of text chunks, kept as the chunks they came in. */
export class Tail {
  private kept: string[] = [];
  private size = 0;
  truncated = false;

  constructor(private readonly cap = 1 << 20) {}

  add(text: string): void {
    this.kept.push(text);
    this.size += text.length;
    if (this.size > 2 * this.cap) this.trim();
  }

  private trim(): void {
    let drop = 0;
    while (this.size - this.kept[drop].length >= this.cap) this.size -= this.kept[drop++].length;
    this.kept.splice(0, drop);
    if (this.size > this.cap) {
      this.kept[0] = this.kept[0].slice(this.size - this.cap);
      this.size = this.cap;
    }
    this.truncated = true;
  }

  /** The kept chunks: all, or those of the last `cap` characters (the first one cut). */
  chunks(): string[] {
    if (this.size > this.cap) this.trim();
    return [...this.kept];
  }

  text(): string {
    return this.chunks().join("");
  }
}

/** A process started with `exec(cmd, { background: true })`, or listed. */
export class Process {
  /** The agent's id of the process (not the guest kernel's). */
  readonly pid: number;
  /** The guest kernel's pid, while it runs. */
  osPid: number | null = null;
  cmd = "";
  /** "running" or "exited". */
  state = "running";
  exitCode: number | null = null;
  signal: number | null = null;
  timedOut = false;

  constructor(private readonly client: Client, private readonly base: string, data: ProcessData) {
    this.pid = data.pid;
    this.update(data);
  }

  private get path(): string {
    return `${this.base}/processes/${this.pid}`;
  }

  private update(d: ProcessData): void {
    this.osPid = d.os_pid ?? null;
    if (d.cmd !== undefined) this.cmd = d.cmd;
    if (d.state !== undefined) this.state = d.state;
    this.exitCode = d.exit_code ?? null;
    this.signal = d.signal ?? null;
    this.timedOut = d.timed_out === true;
  }

  /** Refresh the fields from the daemon. */
  async info(options: CallOptions = {}): Promise<this> {
    this.update(await this.client.json<ProcessData>("GET", this.path, options));
    return this;
  }

  /**
   * Its output as it is written: what the daemon kept (the last 1 MiB of
   * each stream), then live output, until it exits (the fields are then set).
   */
  async *stream(options: CallOptions = {}): AsyncGenerator<OutputEvent> {
    const resp = await this.client.request("GET", this.path + "/stream", { signal: options.signal, timeoutMs: null });
    for await (const ev of ndjson(resp, `process ${this.pid}`, options.signal)) {
      if (ev.type === "stdout" || ev.type === "stderr") {
        yield { type: ev.type, data: typeof ev.data === "string" ? ev.data : "" };
      } else if (ev.type === "exit") {
        this.update({ pid: this.pid, state: "exited", exit_code: num(ev.exit_code), signal: num(ev.signal),
                      timed_out: ev.timed_out === true });
        return;
      }
    }
    throw new CpuosError(`the output stream of process ${this.pid} ended without its exit ` +
                         "(the sandbox died or broke the protocol)");
  }

  /**
   * Standard output and error as byte streams (UTF-8), fed from one
   * stream of the process; `exited` settles when it ends, with its result.
   * Cancelling both streams, or aborting the signal, closes the connection.
   */
  outputStreams(options: CallOptions = {}): {
    stdout: ReadableStream<Uint8Array>;
    stderr: ReadableStream<Uint8Array>;
    exited: Promise<ExecResult>;
  } {
    const enc = new TextEncoder();
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    let open = 2;
    const ctl: Partial<Record<"stdout" | "stderr", ReadableStreamDefaultController<Uint8Array>>> = {};
    const make = (which: "stdout" | "stderr") =>
      new ReadableStream<Uint8Array>({
        start: (c) => { ctl[which] = c; },
        cancel: () => { if (--open === 0) stop.abort(); },
      });
    const stdout = make("stdout"), stderr = make("stderr");
    const exited = this.collect(signal, (ev) => {
      try {
        ctl[ev.type]?.enqueue(enc.encode(ev.data));
      } catch {
        // that stream was cancelled: the other may still be read
      }
    }).then((r) => {
      for (const c of Object.values(ctl)) try { c.close(); } catch { /* cancelled */ }
      return r;
    }, (e: unknown) => {
      for (const c of Object.values(ctl)) try { c.error(e); } catch { /* closed */ }
      throw e;
    });
    exited.catch(() => {}); // a caller who reads only the streams sees the error there
    return { stdout, stderr, exited };
  }

  /** Read the whole output until it exits. */
  async output(options: CallOptions = {}): Promise<ExecResult> {
    return this.collect(options.signal);
  }

  private async collect(signal?: AbortSignal, each?: (ev: OutputEvent) => void): Promise<ExecResult> {
    const out = new Tail(), err = new Tail();
    for await (const ev of this.stream({ signal })) {
      (ev.type === "stdout" ? out : err).add(ev.data);
      each?.(ev);
    }
    return { exitCode: this.exitCode, stdout: out.text(), stderr: err.text(), signal: this.signal,
             timedOut: this.timedOut, stdoutTruncated: out.truncated, stderrTruncated: err.truncated,
             durationMs: null };
  }

  /**
   * Wait for it to exit (at most `timeout`; default as long as it runs),
   * then give its result with the output the daemon kept.
   */
  async wait(options: CallOptions & { timeout?: Duration } = {}): Promise<ExecResult> {
    const limit = options.timeout === undefined ? undefined : seconds(options.timeout);
    this.update(await this.client.json<ProcessData>("POST", this.path + "/wait", {
      query: { timeout: options.timeout }, signal: options.signal,
      timeoutMs: options.timeout === undefined ? null : ((limit ?? 0) + 60) * 1000,
    }));
    if (this.state === "running")
      throw new TimeoutError(`process ${this.pid} is still running after ${options.timeout}`);
    try {
      return await this.output(options);
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
      return { exitCode: this.exitCode, stdout: "", stderr: "", signal: this.signal, timedOut: this.timedOut,
               stdoutTruncated: false, stderrTruncated: false, durationMs: null };
    }
  }

  /** SIGKILL the process and everything it started. */
  async kill(options: CallOptions = {}): Promise<void> {
    await this.client.json("DELETE", this.path, options);
  }

  /** Send a signal ("SIGTERM" or 15) to its process group. */
  async sendSignal(sig: number | string, options: CallOptions = {}): Promise<void> {
    await this.client.json("POST", this.path + "/signal", { json: { signal: sig }, signal: options.signal });
  }

  /** Write to its stdin (text as UTF-8); `eof` closes stdin after the data. */
  async sendStdin(data: string | Uint8Array, options: CallOptions & { eof?: boolean } = {}): Promise<void> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    await this.client.json("POST", this.path + "/stdin", {
      body, query: { eof: options.eof ? "true" : undefined }, signal: options.signal,
    });
  }

  /** Close its stdin: it reads end of file. */
  async closeStdin(options: CallOptions = {}): Promise<void> {
    try {
      await this.sendStdin(new Uint8Array(0), { ...options, eof: true });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e; // it exited: its stdin is closed already
    }
  }

  /** Its stdin as a stream: each chunk written is sent in turn, and `close()` is end of file. */
  stdinStream(options: CallOptions = {}): WritableStream<Uint8Array> {
    return new WritableStream<Uint8Array>({
      write: (chunk) => this.sendStdin(chunk, options),
      close: () => this.closeStdin(options),
      abort: () => this.closeStdin().catch(() => {}),
    });
  }
}
