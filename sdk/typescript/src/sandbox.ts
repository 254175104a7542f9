/**
 * Sandboxes: create, connect, list, pause and resume, fork, checkpoints,
 * commands, code in a kernel (runCode, see code.ts), port URLs and egress
 * network policies.
 */
import { type CallOptions, Client, type ConnectionOptions, type Duration, ndjson, seconds } from "./client.js";
import {
  type CodeContext, type CodeContextOptions, type Execution, type RunCodeOptions, codeContext, contextSegment, runCode,
} from "./code.js";
import { CpuosError, TimeoutError } from "./errors.js";
import { Files } from "./files.js";
import { type ExecResult, Process, type ProcessData, Tail, resultFromJson } from "./process.js";
import { Pty } from "./pty.js";

/** An egress policy, in the AI SDK's spelling (see docs/api.md, Networks). */
export type NetworkPolicy =
  | "allow-all"
  | "deny-all"
  | { mode: "allow-all" | "deny-all"; deniedCIDRs?: readonly string[] }
  | { mode: "custom"; allowedHosts?: readonly string[]; allowedCIDRs?: readonly string[];
      deniedCIDRs?: readonly string[] };

/** Matches a string: exactly, by its start, or a POSIX extended regex found anywhere in it. */
export type StringMatcher = { exact: string } | { startsWith: string } | { regex: string };

/**
 * A request transformation, in the AI SDK's shape: headers cpuosd's egress proxy sets on the
 * requests that match. A value's "{{secret:NAME}}" stands for the account's secret NAME.
 */
export interface RequestTransformation {
  match: {
    host: string;
    path?: StringMatcher;
    method?: readonly string[];
    queryString?: readonly { key?: StringMatcher; value?: StringMatcher }[];
    headers?: readonly { key?: StringMatcher; value?: StringMatcher }[];
  };
  transform: { headers: Readonly<Record<string, string>> };
}

export interface SandboxCreateOptions extends ConnectionOptions, CallOptions {
  /** "python" (the default), "node", "base", the checkpoint's template, one of the account's own (name or id),
   * or an OCI image reference ("node:22-alpine"), pulled by the daemon the first time. */
  template?: string;
  /** How long it lives with no call ("30m"; default 5m). */
  timeout?: Duration;
  vcpus?: number;
  memoryMb?: number;
  diskMb?: number;
  /** Environment variables of every command it runs. */
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  /** What its timeout does: "pause" (the default) or "kill". */
  onTimeout?: "pause" | "kill";
  /**
   * Pause it once it sat idle this long: no call, no stream or port connection open, its CPU
   * under 10%. Any later call resumes it. Default: never.
   */
  idleTimeout?: Duration;
  /** Start from a checkpoint (its id or name): its memory, disk and processes. */
  checkpoint?: string | Checkpoint;
  network?: NetworkPolicy;
  /** Its port URLs need no token. */
  public?: boolean;
  /** How many processes it may run at once (16..65536). */
  maxProcesses?: number;
  /** Names of the account's egress secrets it gets placeholders of. */
  secrets?: string[];
}

export interface ExecOptions extends CallOptions {
  /** Kill the command after this long ("2m" or seconds; default none). */
  timeout?: Duration;
  /** Environment variables, over the sandbox's. */
  env?: Record<string, string>;
  /** Its working directory. */
  cwd?: string;
  /** "user" (the default) or "root". */
  user?: string;
  /** Its standard input, then closed (for a background one: written first, and left open). */
  stdin?: string | Uint8Array;
  /** Called with each chunk of standard output as the command writes it. */
  onStdout?: (data: string) => void;
  onStderr?: (data: string) => void;
}

export type Command = string | readonly string[];

export interface CheckpointData {
  id: string;
  name: string;
  sandbox_id: string;
  template: string;
  vcpus: number;
  memory_mb: number;
  disk_mb: number;
  size_bytes: number;
  created_at: string;
  stored?: boolean;
}

export class Checkpoint {
  readonly id: string;
  readonly name: string;
  readonly sandboxId: string;
  readonly template: string;
  readonly sizeBytes: number;
  readonly createdAt: string;
  /** Also in the daemon's object store (`--s3-endpoint`): it starts sandboxes where the host lost its copy. */
  readonly stored: boolean;

  constructor(private readonly client: Client, d: CheckpointData) {
    this.id = d.id;
    this.name = d.name;
    this.sandboxId = d.sandbox_id;
    this.template = d.template;
    this.sizeBytes = d.size_bytes;
    this.createdAt = d.created_at;
    this.stored = d.stored === true;
  }

  /** The account's checkpoints, newest first. */
  static async list(options: ConnectionOptions & CallOptions = {}): Promise<Checkpoint[]> {
    const client = new Client(options);
    const d = await client.json<{ checkpoints?: CheckpointData[] }>("GET", "/v1/checkpoints", options);
    return (d?.checkpoints ?? []).map((c) => new Checkpoint(client, c));
  }

  /** A checkpoint by its id or name. */
  static async get(idOrName: string, options: ConnectionOptions & CallOptions = {}): Promise<Checkpoint> {
    const client = new Client(options);
    return new Checkpoint(client, await client.json("GET", `/v1/checkpoints/${segment(idOrName)}`, options));
  }

  /** Delete it; sandboxes started from it go on. */
  async delete(options: CallOptions = {}): Promise<void> {
    await this.client.json("DELETE", `/v1/checkpoints/${this.id}`, options);
  }
}

interface SandboxData {
  id: string;
  template: string;
  state: string;
  vcpus: number;
  memory_mb: number;
  disk_mb: number;
  created_at: string;
  expires_at: string | null;
  metadata?: Record<string, string>;
  end_reason: string | null;
  session_id: string;
  paused_at: string | null;
  parent: string | null;
  network?: NetworkPolicy | null;
  public?: boolean;
  port_url?: string | null;
  traffic_token?: string | null;
  secrets?: string[];
  stored?: boolean;
  node?: string | null;
}

/** Calls that boot, save or restore a VM take longer than the others. */
const SLOW_MS = 600_000;

function segment(s: string): string {
  if (!s) throw new TypeError("an empty id");
  return encodeURIComponent(s);
}

/** One resource sample: CPU from the host, the rest as the guest counts it (null when it did not answer). */
export interface SandboxMetric {
  timestamp: string;
  cpuCount: number;
  /** Of its vCPUs, 0..100. */
  cpuUsedPct: number;
  memUsed: number | null;
  memTotal: number | null;
  diskUsed: number | null;
  diskTotal: number | null;
  netRxBytes: number | null;
  netTxBytes: number | null;
}

export class Sandbox {
  readonly id: string;
  readonly files: Files;
  /** Processes on terminals: `sandbox.pty.create({ rows, cols, onData })`. */
  readonly pty: Pty;
  template = "";
  /** "running", "paused", "stopped" or "lost", as last seen. */
  state = "";
  vcpus = 0;
  memoryMb = 0;
  diskMb = 0;
  createdAt = "";
  expiresAt: string | null = null;
  metadata: Record<string, string> = {};
  endReason: string | null = null;
  /** What `Sandbox.resume` takes once it is paused. */
  sessionId = "";
  pausedAt: string | null = null;
  parent: string | null = null;
  network: NetworkPolicy | null = null;
  public = false;
  trafficToken: string | null = null;
  secrets: string[] = [];
  /** Its pause is also in the daemon's object store (`--s3-endpoint`): it resumes where the host lost its copy. */
  stored = false;
  /** The node that owns it where daemons share one database (`cpuosd --node`); null on a single host. */
  node: string | null = null;
  private portUrl: string | null = null;

  private constructor(private readonly client: Client, d: SandboxData) {
    this.id = d.id;
    this.files = new Files(client, this.path);
    this.pty = new Pty(client, this.path);
    this.update(d);
  }

  private get path(): string {
    return `/v1/sandboxes/${this.id}`;
  }

  private update(d: SandboxData): void {
    this.template = d.template;
    this.state = d.state;
    this.vcpus = d.vcpus;
    this.memoryMb = d.memory_mb;
    this.diskMb = d.disk_mb;
    this.createdAt = d.created_at;
    this.expiresAt = d.expires_at ?? null;
    this.metadata = d.metadata ?? {};
    this.endReason = d.end_reason ?? null;
    this.sessionId = d.session_id;
    this.pausedAt = d.paused_at ?? null;
    this.parent = d.parent ?? null;
    this.network = d.network ?? null;
    this.public = d.public === true;
    this.portUrl = d.port_url ?? null;
    this.trafficToken = d.traffic_token ?? null;
    this.secrets = d.secrets ?? [];
    this.stored = d.stored === true;
    this.node = d.node ?? null;
  }

  /** Start a sandbox; it is returned once its agent answers. */
  static async create(options: SandboxCreateOptions = {}): Promise<Sandbox> {
    const client = new Client(options);
    const ckp = options.checkpoint instanceof Checkpoint ? options.checkpoint.id : options.checkpoint;
    const body: Record<string, unknown> = {
      template: options.template ?? (ckp ? undefined : "python"),
      timeout: options.timeout, vcpus: options.vcpus, memory_mb: options.memoryMb, disk_mb: options.diskMb,
      env: options.env, metadata: options.metadata, on_timeout: options.onTimeout, checkpoint: ckp,
      network: typeof options.network === "string" ? { mode: options.network } : options.network,
      public: options.public, max_processes: options.maxProcesses, secrets: options.secrets,
      idle_timeout: options.idleTimeout,
    };
    const d = await client.json<SandboxData>("POST", "/v1/sandboxes", {
      json: body, signal: options.signal, timeoutMs: Math.max(SLOW_MS, client.requestTimeoutMs),
    });
    return new Sandbox(client, d);
  }

  /** A handle on an existing sandbox (running, paused or stopped). */
  static async connect(id: string, options: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const client = new Client(options);
    return new Sandbox(client, await client.json("GET", `/v1/sandboxes/${segment(id)}`, options));
  }

  /** Resume a paused sandbox by the session id `pause()` gave (or its id); a running one is fine. */
  static async resume(sessionOrId: string, options: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const client = new Client(options);
    const d = await client.json<SandboxData>("POST", `/v1/sandboxes/${segment(sessionOrId)}/resume`, {
      signal: options.signal, timeoutMs: Math.max(SLOW_MS, client.requestTimeoutMs),
    });
    return new Sandbox(client, d);
  }

  /** The account's sandboxes, newest first, every page (at most `limit` of them if given). */
  static async list(options: ConnectionOptions & CallOptions & {
    state?: string; metadata?: Record<string, string>; limit?: number;
  } = {}): Promise<Sandbox[]> {
    const client = new Client(options);
    const found: Sandbox[] = [];
    const query: Record<string, string | number | undefined> = { state: options.state };
    for (const [k, v] of Object.entries(options.metadata ?? {})) query[`metadata.${k}`] = v;
    let cursor: string | null = null;
    do {
      const want = options.limit === undefined ? 100 : Math.min(100, options.limit - found.length);
      const page: { sandboxes?: SandboxData[]; next_cursor?: string | null } =
        await client.json("GET", "/v1/sandboxes", { query: { ...query, limit: want, cursor }, signal: options.signal });
      for (const d of page?.sandboxes ?? []) found.push(new Sandbox(client, d));
      cursor = page?.next_cursor ?? null;
    } while (cursor && (options.limit === undefined || found.length < options.limit));
    return found;
  }

  /** Refresh the fields from the daemon. */
  async info(options: CallOptions = {}): Promise<this> {
    this.update(await this.client.json("GET", this.path, options));
    return this;
  }

  async isRunning(options: CallOptions = {}): Promise<boolean> {
    return (await this.info(options)).state === "running";
  }

  /** Make it expire `timeout` from now. */
  async setTimeout(timeout: Duration, options: CallOptions = {}): Promise<this> {
    this.update(await this.client.json("POST", this.path + "/timeout", { json: { timeout }, signal: options.signal }));
    return this;
  }

  /**
   * The URL of its TCP port (HTTP, streaming, WebSocket), for a server
   * listening on 0.0.0.0 in the sandbox; with its traffic token unless
   * the sandbox is public. A request to a paused sandbox resumes it.
   */
  url(port: number): string {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new RangeError(`a port is an integer from 1 to 65535, not ${port}`);
    if (!this.portUrl) throw new CpuosError("this daemon serves no port URLs (it runs with --url-listen none)");
    const url = this.portUrl.replace("{port}", String(port));
    return !this.public && this.trafficToken ? `${url}?cpuos_token=${this.trafficToken}` : url;
  }

  /**
   * Its resource samples, oldest first, one every few seconds while it runs (the last ten
   * minutes; a paused sandbox keeps those it had and is not resumed).
   */
  async getMetrics(options: CallOptions & { limit?: number } = {}): Promise<SandboxMetric[]> {
    const d = await this.client.json<{ metrics?: Record<string, unknown>[] }>("GET", this.path + "/metrics", {
      query: { limit: options.limit }, signal: options.signal,
    });
    const n = (v: unknown) => (typeof v === "number" ? v : null);
    return (d.metrics ?? []).map((m) => ({
      timestamp: String(m.timestamp), cpuCount: n(m.cpu_count) ?? 0, cpuUsedPct: n(m.cpu_used_pct) ?? 0,
      memUsed: n(m.mem_used), memTotal: n(m.mem_total), diskUsed: n(m.disk_used), diskTotal: n(m.disk_total),
      netRxBytes: n(m.net_rx_bytes), netTxBytes: n(m.net_tx_bytes),
    }));
  }

  /**
   * Its console log (the guest kernel's and cpuos's agent's messages: boots, restores, out of
   * memory kills, panics), kept 7 days after it stopped: the last `tail` bytes (default 64 KiB).
   */
  async getLogs(options: CallOptions & { tail?: number } = {}): Promise<string> {
    const resp = await this.client.request("GET", this.path + "/logs", { query: { tail: options.tail }, signal: options.signal });
    return await resp.text();
  }

  /** Its egress policy as the daemon keeps it (null when the daemon runs without networks). */
  async getNetwork(options: CallOptions = {}): Promise<NetworkPolicy | null> {
    const d = await this.client.json<{ policy?: NetworkPolicy | null }>("GET", this.path + "/network", options);
    return (this.network = d?.policy ?? null);
  }

  /** Replace its egress policy; a running sandbox has it at once. */
  async setNetwork(policy: NetworkPolicy, options: CallOptions = {}): Promise<NetworkPolicy | null> {
    const d = await this.client.json<{ policy?: NetworkPolicy | null }>("PUT", this.path + "/network", {
      json: typeof policy === "string" ? { mode: policy } : policy, signal: options.signal,
    });
    return (this.network = d?.policy ?? null);
  }

  /**
   * Its request transformations: rules whose headers cpuosd's egress proxy sets on the
   * requests that match, outside the sandbox. A header value given literally reads "***";
   * a secret's reference ("{{secret:NAME}}") as it is.
   */
  async getRequestTransformations(options: CallOptions = {}): Promise<RequestTransformation[]> {
    const d = await this.client.json<{ transformations?: RequestTransformation[] }>(
      "GET", this.path + "/network/transformations", options);
    return d?.transformations ?? [];
  }

  /** Replace its request transformations (the AI SDK's setRequestTransformations); [] removes them. */
  async setRequestTransformations(rules: readonly RequestTransformation[], options: CallOptions = {}):
    Promise<RequestTransformation[]> {
    const d = await this.client.json<{ transformations?: RequestTransformation[] }>(
      "PUT", this.path + "/network/transformations", { json: { transformations: rules }, signal: options.signal });
    return d?.transformations ?? [];
  }

  /** Add request transformations: a rule whose match equals one held adds its headers to it. */
  async addRequestTransformations(rules: readonly RequestTransformation[], options: CallOptions = {}):
    Promise<RequestTransformation[]> {
    const d = await this.client.json<{ transformations?: RequestTransformation[] }>(
      "POST", this.path + "/network/transformations", { json: { transformations: rules }, signal: options.signal });
    return d?.transformations ?? [];
  }

  /** Stop it for good (fine if it already stopped). */
  async kill(options: CallOptions = {}): Promise<void> {
    await this.client.json("DELETE", this.path, options);
    if (this.state === "running" || this.state === "paused") this.state = "stopped";
  }

  /**
   * Pause it: memory, disk and processes are kept, and it holds no CPU or
   * RAM. Any later call resumes it; gives the session id for `Sandbox.resume`.
   */
  async pause(options: CallOptions = {}): Promise<string> {
    this.update(await this.client.json("POST", this.path + "/pause", {
      signal: options.signal, timeoutMs: Math.max(SLOW_MS, this.client.requestTimeoutMs),
    }));
    if (!this.sessionId) throw new CpuosError(`cpuosd paused ${this.id} but sent no session id`);
    return this.sessionId;
  }

  /** Resume it if it is paused. */
  async resume(options: CallOptions = {}): Promise<this> {
    this.update(await this.client.json("POST", this.path + "/resume", {
      signal: options.signal, timeoutMs: Math.max(SLOW_MS, this.client.requestTimeoutMs),
    }));
    return this;
  }

  /** `count` new sandboxes with its memory, disk and processes as they are now; it goes on. */
  async fork(count = 1, options: CallOptions = {}): Promise<Sandbox[]> {
    const d = await this.client.json<{ sandboxes?: SandboxData[] }>("POST", this.path + "/fork", {
      json: { count }, signal: options.signal, timeoutMs: Math.max(SLOW_MS, this.client.requestTimeoutMs),
    });
    return (d?.sandboxes ?? []).map((s) => new Sandbox(this.client, s));
  }

  /** Save it as a named checkpoint to start sandboxes from; it goes on. */
  async checkpoint(name: string, options: CallOptions = {}): Promise<Checkpoint> {
    return new Checkpoint(this.client, await this.client.json("POST", this.path + "/checkpoints", {
      json: { name }, signal: options.signal, timeoutMs: Math.max(SLOW_MS, this.client.requestTimeoutMs),
    }));
  }

  /**
   * Run a command: a string goes to /bin/sh -c, an array is the argv. Its
   * result comes once it ended (a non-zero exit is a result, its own
   * timeout a TimeoutError with `result`); with `background: true` a
   * Process at once. Aborting the signal kills a foreground command.
   */
  exec(cmd: Command, options: ExecOptions & { background: true }): Promise<Process>;
  exec(cmd: Command, options?: ExecOptions & { background?: false }): Promise<ExecResult>;
  async exec(cmd: Command, options: ExecOptions & { background?: boolean } = {}): Promise<ExecResult | Process> {
    const body: Record<string, unknown> = typeof cmd === "string" ? { cmd } : { argv: [...cmd] };
    if (typeof options.stdin === "string") body.stdin = options.stdin;
    else if (options.stdin !== undefined) body.stdin_base64 = Buffer.from(options.stdin).toString("base64");
    Object.assign(body, { timeout: options.timeout, env: options.env, cwd: options.cwd, user: options.user });
    if (options.background) {
      if (options.onStdout || options.onStderr)
        throw new TypeError("onStdout/onStderr are for foreground commands: read a background one with process.stream()");
      body.background = true;
      return new Process(this.client, this.path,
                         await this.client.json<ProcessData>("POST", this.path + "/exec", { json: body, signal: options.signal }));
    }
    const limit = options.timeout === undefined ? undefined : seconds(options.timeout);
    const timeoutMs = options.timeout === undefined ? null : ((limit ?? 0) + 60) * 1000;
    let result: ExecResult;
    if (!options.onStdout && !options.onStderr) {
      result = resultFromJson(await this.client.json("POST", this.path + "/exec", {
        json: body, signal: options.signal, timeoutMs,
      }));
    } else {
      body.stream = true;
      const resp = await this.client.request("POST", this.path + "/exec", { json: body, signal: options.signal, timeoutMs });
      result = await streamed(resp, options);
    }
    if (result.timedOut)
      throw new TimeoutError(`the command timed out after ${options.timeout}: ${JSON.stringify(cmd)}`, { result });
    return result;
  }

  /**
   * Run code in a context's kernel, like a notebook cell: its variables,
   * imports and working directory persist for the next call there. With
   * any callback the answer is streamed and they are called as its lines
   * come; the whole Execution is returned either way. An exception in the
   * code is `error`, a timeout `timedOut`: neither is thrown. A call while
   * another runs in the context is a ConflictError; aborting the signal
   * interrupts the code.
   */
  async runCode(code: string, options: RunCodeOptions = {}): Promise<Execution> {
    return runCode(this.client, this.path, code, options);
  }

  /** A context: a kernel of its own, started now, for `runCode(code, { context })`. */
  async createCodeContext(options: CodeContextOptions = {}): Promise<CodeContext> {
    const { language, cwd, id, user } = options;
    return codeContext(await this.client.json("POST", this.path + "/code/contexts", {
      json: { language, cwd, id, user }, signal: options.signal,
    }));
  }

  /** Its contexts (those started so far, the default ones included). */
  async listCodeContexts(options: CallOptions = {}): Promise<CodeContext[]> {
    const d = await this.client.json<{ contexts?: unknown[] }>("GET", this.path + "/code/contexts", options);
    return (d?.contexts ?? []).map(codeContext);
  }

  /** A new kernel for a context: its state is gone (a call running in it ends as a dead kernel's). */
  async restartCodeContext(ctx: string | CodeContext, options: CallOptions = {}): Promise<CodeContext> {
    return codeContext(await this.client.json("POST", `${this.path}/code/contexts/${contextSegment(ctx)}/restart`,
                                              options));
  }

  /** Kill a context's kernel and forget the context. */
  async removeCodeContext(ctx: string | CodeContext, options: CallOptions = {}): Promise<void> {
    await this.client.json("DELETE", `${this.path}/code/contexts/${contextSegment(ctx)}`, options);
  }

  /** Its background processes (running, and the last ones that exited). */
  async processes(options: CallOptions = {}): Promise<Process[]> {
    const d = await this.client.json<{ processes?: ProcessData[] }>("GET", this.path + "/processes", options);
    return (d?.processes ?? []).map((p) => new Process(this.client, this.path, p));
  }

  /** One of its processes by pid. */
  async process(pid: number, options: CallOptions = {}): Promise<Process> {
    return new Process(this.client, this.path, await this.client.json("GET", `${this.path}/processes/${pid}`, options));
  }
}

async function streamed(resp: Response, options: ExecOptions): Promise<ExecResult> {
  const out = new Tail(), err = new Tail();
  for await (const ev of ndjson(resp, "the command", options.signal)) {
    const data = typeof ev.data === "string" ? ev.data : "";
    if (ev.type === "stdout") {
      out.add(data);
      options.onStdout?.(data);
    } else if (ev.type === "stderr") {
      err.add(data);
      options.onStderr?.(data);
    } else if (ev.type === "exit") {
      return { ...resultFromJson(ev), stdout: out.text(), stderr: err.text(),
               stdoutTruncated: out.truncated, stderrTruncated: err.truncated };
    }
  }
  throw new CpuosError("the command's output stream ended without its exit (the sandbox died or broke the protocol)");
}
