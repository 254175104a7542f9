/**
 * Terminals: processes on a pseudo-terminal, as `sandbox.pty` (shaped
 * after E2B's). Output is bytes, as a terminal emulator (xterm.js) takes
 * them; input is keystrokes; the size follows the user's window.
 */
import { type CallOptions, type Client, type Duration, ndjson } from "./client.js";
import { CpuosError, NotFoundError } from "./errors.js";

/** A terminal's size in character cells. */
export interface PtySize {
  rows: number;
  cols: number;
}

export interface PtyCreateOptions extends CallOptions {
  rows?: number;
  cols?: number;
  /** Called with each chunk of the terminal's output. */
  onData?: (data: Uint8Array) => void;
  /** A shell command or argv; default a login shell (bash, else sh). */
  cmd?: string | string[];
  cwd?: string;
  envs?: Record<string, string>;
  /** "user" (the default) or "root". */
  user?: string;
  /** Kill it after this long; default: it runs until it exits or is killed. */
  timeout?: Duration;
}

/** How a terminal's process ended. */
export interface PtyExit {
  exitCode: number | null;
  signal: number | null;
}

/** A login shell: bash where the image has it, else sh (as `cpuos shell`). */
const DEFAULT_SHELL = "if [ -x /bin/bash ]; then exec /bin/bash -l; else exec /bin/sh -l; fi";

const num = (v: unknown): number | null => (typeof v === "number" ? v : null);

function unbase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** A process on a terminal. Its output goes to `onData` until it exits; `wait()` gives its end. */
export class PtyHandle {
  private readonly stop = new AbortController();
  private readonly done: Promise<PtyExit>;

  constructor(private readonly pty: Pty, readonly pid: number, onData: (data: Uint8Array) => void) {
    this.done = this.pump(onData);
    this.done.catch(() => {}); // reported by wait()
  }

  private async pump(onData: (data: Uint8Array) => void): Promise<PtyExit> {
    const resp = await this.pty.client.request("GET", this.pty.processPath(this.pid) + "/stream",
                                               { signal: this.stop.signal, timeoutMs: null });
    for await (const ev of ndjson(resp, `process ${this.pid}`, this.stop.signal)) {
      if (ev.type === "pty" && typeof ev.data_base64 === "string") onData(unbase64(ev.data_base64));
      else if (ev.type === "exit") return { exitCode: num(ev.exit_code), signal: num(ev.signal) };
    }
    throw new CpuosError(`the terminal stream of process ${this.pid} ended without its exit`);
  }

  /** Resolves when the process exits. */
  wait(): Promise<PtyExit> {
    return this.done;
  }

  /** Stop receiving output; the process keeps running (connect again with `pty.connect`). */
  disconnect(): void {
    this.stop.abort();
  }

  sendInput(data: string | Uint8Array, options: CallOptions = {}): Promise<void> {
    return this.pty.sendInput(this.pid, data, options);
  }

  resize(size: PtySize, options: CallOptions = {}): Promise<void> {
    return this.pty.resize(this.pid, size, options);
  }

  kill(options: CallOptions = {}): Promise<boolean> {
    return this.pty.kill(this.pid, options);
  }
}

/** `sandbox.pty`: start, reach and end processes on terminals. */
export class Pty {
  /** @internal */
  constructor(readonly client: Client, private readonly base: string) {}

  /** @internal */
  processPath(pid: number): string {
    return `${this.base}/processes/${pid}`;
  }

  /** Start a process (a login shell, or `cmd`) on a new terminal. */
  async create(options: PtyCreateOptions = {}): Promise<PtyHandle> {
    const body: Record<string, unknown> = {
      background: true, pty: { rows: options.rows ?? 24, cols: options.cols ?? 80 },
    };
    if (Array.isArray(options.cmd)) body.argv = options.cmd;
    else body.cmd = options.cmd ?? DEFAULT_SHELL;
    if (options.cwd !== undefined) body.cwd = options.cwd;
    if (options.envs) body.env = options.envs;
    if (options.user !== undefined) body.user = options.user;
    if (options.timeout !== undefined) body.timeout = options.timeout;
    const d = await this.client.json<{ pid: number }>("POST", this.base + "/exec", { json: body, signal: options.signal });
    return new PtyHandle(this, d.pid, options.onData ?? (() => {}));
  }

  /** Reattach to a running terminal process: the output kept (its last 1 MiB) comes first. */
  async connect(pid: number, options: CallOptions & { onData?: (data: Uint8Array) => void } = {}): Promise<PtyHandle> {
    await this.client.json("GET", this.processPath(pid), { signal: options.signal });
    return new PtyHandle(this, pid, options.onData ?? (() => {}));
  }

  /** Type into the terminal of process `pid` (text as UTF-8). */
  async sendInput(pid: number, data: string | Uint8Array, options: CallOptions = {}): Promise<void> {
    const body = typeof data === "string" ? new TextEncoder().encode(data) : data;
    await this.client.json("POST", this.processPath(pid) + "/stdin", { body, signal: options.signal });
  }

  /** Give the terminal a new size; the process gets SIGWINCH. */
  async resize(pid: number, size: PtySize, options: CallOptions = {}): Promise<void> {
    await this.client.json("POST", this.processPath(pid) + "/resize", {
      json: { rows: size.rows, cols: size.cols }, signal: options.signal,
    });
  }

  /** SIGKILL it and what it started: true, or false when it was gone already. */
  async kill(pid: number, options: CallOptions = {}): Promise<boolean> {
    try {
      await this.client.json("DELETE", this.processPath(pid), options);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }
}
