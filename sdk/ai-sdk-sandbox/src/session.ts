/**
 * AI SDK 7 sandbox sessions over a cpuos sandbox: the tool-facing
 * Experimental_SandboxSession (files, run, spawn) and, above it, the
 * harness's network session (id, ports, stop/destroy, network policy,
 * restricted()). Paths that are not absolute resolve against the
 * sandbox's working directory, read from the sandbox itself.
 */
import { HarnessCapabilityUnsupportedError } from "@ai-sdk/harness";
import type {
  HarnessV1NetworkPolicy, HarnessV1NetworkSandboxSession, HarnessV1PortEndpoint, HarnessV1RequestTransformation,
} from "@ai-sdk/harness";
import {
  type Experimental_SandboxDirectoryEntry as DirectoryEntry,
  type Experimental_SandboxFileStat as FileStat,
  type Experimental_SandboxProcess as SandboxProcess,
  type Experimental_SandboxSession as SandboxSession,
  type Experimental_SandboxSpawnOptions as SpawnOptions,
  type Experimental_WritableSandboxProcess as WritableSandboxProcess,
  extractLines,
} from "@ai-sdk/provider-utils";
import { ConflictError, type Entry, NotFoundError, type Process, type Sandbox } from "@cpuos/sdk";
import { posix } from "node:path";

export const PROVIDER_ID = "cpuos-sandbox";

type PathOptions = { path: string; abortSignal?: AbortSignal };
type ProcessOptions = { command: string; workingDirectory?: string; env?: Record<string, string>;
                        abortSignal?: AbortSignal };

const unsupported = (message: string) => new HarnessCapabilityUnsupportedError({ message, harnessId: PROVIDER_ID });

/** null for a file that is not there; every other failure stays one. */
async function orNull<T>(p: Promise<T>): Promise<T | null> {
  try {
    return await p;
  } catch (e) {
    if (e instanceof NotFoundError) return null;
    throw e;
  }
}

function encode(content: string, encoding = "utf-8"): Uint8Array {
  const enc = encoding.toLowerCase().replace(/^utf-8$/, "utf8");
  if (!Buffer.isEncoding(enc)) throw new RangeError(`cannot write text as '${encoding}'`);
  return Buffer.from(content, enc);
}

/** A process's exit status as a shell reports it: 128 + the signal that ended it. */
const exitStatus = (code: number | null, signal: number | null) => code ?? (signal ? 128 + signal : -1);

/** The tool-facing session: everything a tool may do in the sandbox, and nothing else. */
export class CpuosSandboxSession implements SandboxSession {
  /** shell: what runs commands, "bash" or (an image without it, as Alpine's) "sh". */
  constructor(protected readonly sbx: Sandbox, readonly defaultWorkingDirectory: string,
              readonly shell: "bash" | "sh" = "bash") {}

  get description(): string {
    // A template of the account's own is an image it brought (its id begins "tpl_"): its distribution and
    // shell are the image's, its default user the image's USER or 'user'.
    const own = this.sbx.template.startsWith("tpl_");
    return [
      `cpuos sandbox ${this.sbx.id}: a Linux microVM of its own (${own ? "from an OCI image" : "Debian"}, ` +
        `template '${this.sbx.template}').`,
      `Commands run in ${this.shell} as ${own ? "the image's default user" : "the user 'user'"}, ` +
        `starting in ${this.defaultWorkingDirectory};`,
      `relative paths resolve there. Files and processes persist for the sandbox's lifetime, across stops.`,
      this.networkLine(),
    ].join("\n");
  }

  protected networkLine(): string {
    const p = this.sbx.network as { mode?: string; allowedHosts?: string[] } | null;
    if (!p || p.mode === "deny-all") return "It has no network access.";
    if (p.mode === "allow-all") return "It may reach the internet (not private or host addresses).";
    return `It may reach only: ${(p.allowedHosts ?? []).join(", ") || "listed address ranges"}.`;
  }

  protected resolve(path: string): string {
    return posix.resolve(this.defaultWorkingDirectory, path);
  }

  readonly readFile = async ({ path, abortSignal }: PathOptions): Promise<ReadableStream<Uint8Array> | null> =>
    orNull(this.sbx.files.read(this.resolve(path), { format: "stream", signal: abortSignal }));

  readonly readBinaryFile = async ({ path, abortSignal }: PathOptions): Promise<Uint8Array | null> =>
    orNull(this.sbx.files.read(this.resolve(path), { format: "bytes", signal: abortSignal }));

  readonly readTextFile = async (o: PathOptions & { encoding?: string; startLine?: number; endLine?: number }):
    Promise<string | null> => {
    const bytes = await this.readBinaryFile(o);
    if (bytes === null) return null;
    const text = new TextDecoder(o.encoding ?? "utf-8").decode(bytes);
    return o.startLine === undefined && o.endLine === undefined
      ? text : extractLines({ text, startLine: o.startLine, endLine: o.endLine });
  };

  readonly writeFile = async (o: { path: string; content: ReadableStream<Uint8Array>; abortSignal?: AbortSignal }) => {
    await this.sbx.files.write(this.resolve(o.path), o.content, { signal: o.abortSignal });
  };

  readonly writeBinaryFile = async (o: { path: string; content: Uint8Array; abortSignal?: AbortSignal }) => {
    await this.sbx.files.write(this.resolve(o.path), o.content, { signal: o.abortSignal });
  };

  readonly writeTextFile = async (o: { path: string; content: string; encoding?: string; abortSignal?: AbortSignal }) => {
    await this.sbx.files.write(this.resolve(o.path), encode(o.content, o.encoding), { signal: o.abortSignal });
  };

  /** Follows symlinks (at most 40, as the kernel does). */
  readonly stat = async ({ path, abortSignal }: PathOptions): Promise<FileStat | null> => {
    let at = this.resolve(path);
    for (let hops = 0; hops <= 40; hops++) {
      const e: Entry | null = await orNull(this.sbx.files.stat(at, { signal: abortSignal }));
      if (!e) return null;
      if (e.type !== "symlink")
        return { type: e.type === "file" ? "file" : e.type === "dir" ? "directory" : "other", size: e.size };
      at = posix.resolve(posix.dirname(at), e.target ?? "");
    }
    throw new Error(`too many levels of symbolic links at '${path}'`);
  };

  readonly listDirectory = async ({ path, abortSignal }: PathOptions): Promise<DirectoryEntry[] | null> => {
    const entries = await orNull(this.sbx.files.list(this.resolve(path), { signal: abortSignal }));
    return entries?.map((e) => ({
      name: e.name,
      type: e.type === "dir" ? "directory" : e.type === "file" || e.type === "symlink" ? e.type : "other",
    })) ?? null;
  };

  /** A link is deleted itself; a directory is refused. */
  readonly deleteFile = async ({ path, abortSignal }: PathOptions): Promise<boolean> => {
    const at = this.resolve(path);
    const e = await orNull(this.sbx.files.stat(at, { signal: abortSignal }));
    if (!e) return false;
    if (e.type === "dir") throw new Error(`'${path}' is a directory`);
    return (await orNull(this.sbx.files.remove(at, { signal: abortSignal }).then(() => true))) ?? false;
  };

  readonly run = async ({ command, workingDirectory, env, abortSignal }: ProcessOptions) => {
    const r = await this.sbx.exec([this.shell, "-c", command], {
      cwd: this.resolve(workingDirectory ?? "."), env, signal: abortSignal,
    });
    return { exitCode: exitStatus(r.exitCode, r.signal), stdout: r.stdout, stderr: r.stderr };
  };

  readonly spawn = (async (o: SpawnOptions): Promise<SandboxProcess | WritableSandboxProcess> => {
    o.abortSignal?.throwIfAborted();
    // The start is not cancelled midway: a process the daemon started
    // would be left running. An abort meanwhile kills it (in spawned).
    const proc = await this.sbx.exec([this.shell, "-c", o.command], {
      background: true, cwd: this.resolve(o.workingDirectory ?? "."), env: o.env,
    });
    // A background process's stdin stays open for writes: closed at once
    // unless asked for, so that a command reading it ends instead of waiting.
    if (o.stdin !== true) await proc.closeStdin();
    return spawned(proc, o.abortSignal, o.stdin === true);
  }) as SandboxSession["spawn"];
}

function spawned(proc: Process, abortSignal: AbortSignal | undefined, stdin: boolean):
  SandboxProcess | WritableSandboxProcess {
  let killed: Promise<void> | undefined;
  const kill = () => (killed ??= proc.kill().catch((e) => {
    if (!(e instanceof NotFoundError || e instanceof ConflictError)) throw e;
  }));
  const { stdout, stderr, exited } = proc.outputStreams();
  const onAbort = () => void kill().catch(() => {});
  abortSignal?.addEventListener("abort", onAbort, { once: true });
  if (abortSignal?.aborted) onAbort();
  void exited.finally(() => abortSignal?.removeEventListener("abort", onAbort)).catch(() => {});
  const wait = async () => {
    const r = await exited;
    if (abortSignal?.aborted) throw abortSignal.reason;
    return { exitCode: exitStatus(r.exitCode, r.signal) };
  };
  // the guest kernel's pid, which a command in the sandbox can signal
  const base = { pid: proc.osPid ?? undefined, stdout, stderr, wait, kill };
  return stdin ? { ...base, stdin: proc.stdinStream() } : base;
}

export interface NetworkSessionOptions {
  /** Ports getPortEndpoint serves (setPorts replaces them). */
  ports?: readonly number[];
  /** Whether stop() and destroy() act on the sandbox (false for a sandbox the caller owns). */
  owned?: boolean;
  /** What runs commands: "bash" (the default) or "sh". */
  shell?: "bash" | "sh";
}

/** The harness's session: the tool-facing one plus what only the code that owns the sandbox may do. */
export class CpuosNetworkSandboxSession extends CpuosSandboxSession implements HarnessV1NetworkSandboxSession {
  private portSet: number[];
  private readonly owned: boolean;
  private policyChain: Promise<unknown> = Promise.resolve();

  constructor(sbx: Sandbox, defaultWorkingDirectory: string, options: NetworkSessionOptions = {}) {
    super(sbx, defaultWorkingDirectory, options.shell ?? "bash");
    this.portSet = [...(options.ports ?? [])];
    this.owned = options.owned ?? true;
  }

  /** The sandbox id: resumeSession({ sessionId: id }) and resumeCpuosNetworkSandboxSession take it. */
  get id(): string {
    return this.sbx.id;
  }

  /** The cpuos SDK's handle, for what the AI SDK has no call for (fork, checkpoints). */
  get sandbox(): Sandbox {
    return this.sbx;
  }

  get ports(): ReadonlyArray<number> {
    return this.portSet;
  }

  override get description(): string {
    const ports = this.portSet.length
      ? `Servers listening on 0.0.0.0 at port ${this.portSet.join(", ")} are reachable from outside.`
      : "No port is exposed.";
    return `${super.description}\n${ports}`;
  }

  readonly getPortEndpoint = async ({ port, protocol = "http" }: { port: number; protocol?: "http" | "https" | "ws" }):
    Promise<HarnessV1PortEndpoint> => {
    if (!this.portSet.includes(port))
      throw unsupported(`port ${port} is not exposed (ports: ${this.portSet.join(", ") || "none"}; use setPorts)`);
    const url = this.sbx.url(port).split("?")[0];
    if (protocol === "https" && !url.startsWith("https:"))
      throw unsupported("this cpuosd serves port URLs over plain HTTP (put a TLS front before --url-listen)");
    const full = protocol === "ws" ? url.replace(/^http/, "ws") : url;
    return this.sbx.public || !this.sbx.trafficToken
      ? { url: full } : { url: full, headers: { "cpuos-traffic-token": this.sbx.trafficToken } };
  };

  /** @deprecated as in the interface: a URL that works alone, its token in the query (a browser keeps it as a cookie). */
  readonly getPortUrl = async (o: { port: number; protocol?: "http" | "https" | "ws" }): Promise<string> => {
    const { url } = await this.getPortEndpoint(o);
    return this.sbx.public || !this.sbx.trafficToken ? url : `${url}?cpuos_token=${this.sbx.trafficToken}`;
  };

  /** cpuos serves every port of a sandbox: this sets which ones the session hands out. */
  readonly setPorts = async (ports: ReadonlyArray<number>, options?: { abortSignal?: AbortSignal }) => {
    options?.abortSignal?.throwIfAborted();
    for (const p of ports)
      if (!Number.isInteger(p) || p < 1 || p > 65535) throw new RangeError(`not a port: ${p}`);
    this.portSet = [...new Set(ports)];
  };

  /** Pauses the sandbox (memory, disk and processes kept); resumeSession takes it up again. */
  readonly stop = async () => {
    if (!this.owned) return;
    try {
      await this.sbx.pause();
    } catch (e) {
      if (!(e instanceof ConflictError || e instanceof NotFoundError)) throw e; // already stopped or gone
    }
  };

  /** Deletes the sandbox, running or paused. */
  readonly destroy = async () => {
    if (!this.owned) return;
    try {
      await this.sbx.kill();
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  };

  /** Enforced on the host (nftables, cpuosd's resolver and proxy), at once, on a running sandbox. */
  readonly setNetworkPolicy = (policy: HarnessV1NetworkPolicy): Promise<void> => {
    const next = this.policyChain.then(() => this.sbx.setNetwork(toCpuosPolicy(policy)));
    this.policyChain = next.catch(() => {});
    return next.then(() => {});
  };

  /**
   * Headers set on the sandbox's requests by cpuosd's egress proxy, outside the VM: a harness's
   * model key never enters it. Rules match by host (wildcards as allowedHosts), path, method,
   * query and headers; a value's "{{secret:NAME}}" is the account's secret NAME. HTTPS to a host
   * with rules is ended and checked by the proxy (the guest trusts cpuosd's CA). Serialised with
   * the policy changes.
   */
  readonly setRequestTransformations = (rules: ReadonlyArray<HarnessV1RequestTransformation>): Promise<void> =>
    this.transformations(rules, false);

  /** Adds rules: one whose match equals a held rule's adds its headers to it (the new value wins). */
  readonly addRequestTransformations = (rules: ReadonlyArray<HarnessV1RequestTransformation>): Promise<void> =>
    this.transformations(rules, true);

  private transformations(rules: ReadonlyArray<HarnessV1RequestTransformation>, add: boolean): Promise<void> {
    const copy = rules.map((r) => JSON.parse(JSON.stringify(r)));
    const next = this.policyChain.then(() =>
      add ? this.sbx.addRequestTransformations(copy) : this.sbx.setRequestTransformations(copy));
    this.policyChain = next.catch(() => {});
    return next.then(() => {});
  }

  /** A frozen view with only the description, the file methods, run and spawn, over the same sandbox. */
  readonly restricted = (): SandboxSession => {
    const view: SandboxSession = {
      description: this.description,
      readFile: this.readFile, readBinaryFile: this.readBinaryFile, readTextFile: this.readTextFile,
      writeFile: this.writeFile, writeBinaryFile: this.writeBinaryFile, writeTextFile: this.writeTextFile,
      stat: this.stat, listDirectory: this.listDirectory, deleteFile: this.deleteFile,
      run: this.run, spawn: this.spawn,
    };
    return Object.freeze(view);
  };
}

/** The AI SDK's policy in cpuos's spelling (the same names; readonly lists copied). */
export function toCpuosPolicy(p: HarnessV1NetworkPolicy) {
  if (p.mode !== "custom") return { mode: p.mode };
  const out: { mode: "custom"; allowedHosts?: string[]; allowedCIDRs?: string[]; deniedCIDRs?: string[] } = { mode: "custom" };
  if (p.allowedHosts) out.allowedHosts = [...p.allowedHosts];
  if (p.allowedCIDRs) out.allowedCIDRs = [...p.allowedCIDRs];
  if (p.deniedCIDRs) out.deniedCIDRs = [...p.deniedCIDRs];
  return out;
}
