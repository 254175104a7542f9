/**
 * A sandbox's files: streamed writes and reads, stat, listings, mkdir,
 * rename and delete. Paths are absolute guest paths.
 */
import { type CallOptions, type Client, ndjson } from "./client.js";
import { CpuosError, NotFoundError } from "./errors.js";

export interface Entry {
  path: string;
  name: string;
  /** "file", "dir", "symlink" or "other". */
  type: string;
  size: number;
  /** Octal permission bits, e.g. "0644". */
  mode: string;
  mtime: string;
  uid: number;
  gid: number;
  /** A symlink's target. */
  target?: string;
}

/** A change under a watched path. */
export interface FilesystemEvent {
  /** "create", "write", "remove", "rename", "chmod", or "overflow" (events were lost: look again). */
  type: string;
  /** The absolute path that changed (the watched path for an overflow). */
  path: string;
  /** `path` relative to the watched path. */
  name: string;
  isDir: boolean;
  /** For an overflow: why. */
  reason?: string;
}

export interface WatchOptions extends CallOptions {
  /** Also every directory under the path, new ones included. */
  recursive?: boolean;
  /** Called once the watch ended: with the error that ended it, or undefined. */
  onExit?: (err?: unknown) => void;
}

/** A running watch: `stop()` ends it. */
export class WatchHandle {
  /** @internal */
  constructor(private readonly stopper: AbortController, readonly done: Promise<void>) {}

  async stop(): Promise<void> {
    this.stopper.abort();
    await this.done.catch(() => {});
  }
}

export type FileData = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array>;

export interface WriteOptions extends CallOptions {
  /** Permission bits: 0o755 or "0755" (default 0644). */
  mode?: number | string;
  /** Its owner, "user" (the default) or "root". */
  user?: string;
}

export type ReadFormat = "text" | "bytes" | "stream";

const mode = (m: number | string | undefined) =>
  m === undefined ? undefined : typeof m === "number" ? m.toString(8).padStart(4, "0") : m;

function entry(d: Partial<Entry> & { path: string }): Entry {
  return { name: d.path.split("/").pop() ?? "", type: "file", size: 0, mode: "", mtime: "", uid: 0, gid: 0, ...d };
}

export class Files {
  constructor(private readonly client: Client, private readonly base: string) {}

  private get path(): string {
    return this.base + "/files";
  }

  /** Write a file (text as UTF-8), streamed; parent directories are made, an old file replaced. */
  async write(path: string, data: FileData, options: WriteOptions = {}): Promise<Entry> {
    let body: Uint8Array | string | ReadableStream<Uint8Array>;
    if (typeof data === "string" || data instanceof Uint8Array || data instanceof ReadableStream) body = data;
    else if (data instanceof ArrayBuffer) body = new Uint8Array(data);
    else if (data instanceof Blob) body = data.stream() as ReadableStream<Uint8Array>;
    else throw new TypeError("files.write takes a string, Uint8Array, ArrayBuffer, Blob or ReadableStream");
    if (typeof body === "string") body = new TextEncoder().encode(body);
    const d = await this.client.json<Partial<Entry> & { path: string }>("PUT", this.path, {
      body, query: { path, mode: mode(options.mode), user: options.user }, signal: options.signal,
      timeoutMs: body instanceof ReadableStream ? null : undefined,
    });
    return entry(d ?? { path });
  }

  /** Unpack a tar archive under directory `path` (made if missing), owned by `user`. */
  async writeArchive(path: string, data: Uint8Array | ReadableStream<Uint8Array>,
                     options: CallOptions & { user?: string } = {}): Promise<void> {
    await this.client.json("PUT", this.path + "/archive", {
      body: data, query: { path, user: options.user }, signal: options.signal,
      timeoutMs: data instanceof ReadableStream ? null : undefined,
    });
  }

  /** A tar archive of the directory (or file) at `path`, streamed as it is made. */
  async readArchive(path: string, options: CallOptions = {}): Promise<ReadableStream<Uint8Array>> {
    const resp = await this.client.request("GET", this.path + "/archive", {
      query: { path }, signal: options.signal, timeoutMs: null,
    });
    return resp.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
  }

  /** The file as text (the default), bytes, or a stream of its bytes. */
  read(path: string, options?: CallOptions & { format?: "text" }): Promise<string>;
  read(path: string, options: CallOptions & { format: "bytes" }): Promise<Uint8Array>;
  read(path: string, options: CallOptions & { format: "stream" }): Promise<ReadableStream<Uint8Array>>;
  async read(path: string, options: CallOptions & { format?: ReadFormat } = {}):
    Promise<string | Uint8Array | ReadableStream<Uint8Array>> {
    const format = options.format ?? "text";
    const resp = await this.client.request("GET", this.path, {
      query: { path }, signal: options.signal, timeoutMs: format === "stream" ? null : undefined,
    });
    if (format === "stream") return resp.body ?? new ReadableStream<Uint8Array>({ start: (c) => c.close() });
    let bytes: Uint8Array;
    try {
      bytes = new Uint8Array(await resp.arrayBuffer());
    } catch (e) {
      if (options.signal?.aborted) throw options.signal.reason;
      throw new CpuosError(`the download of '${path}' broke off`, { cause: e });
    }
    return format === "bytes" ? bytes : new TextDecoder().decode(bytes);
  }

  /** What is at `path` (a symlink itself, not its target). */
  async stat(path: string, options: CallOptions = {}): Promise<Entry> {
    return entry(await this.client.json("GET", this.path + "/stat", { query: { path }, signal: options.signal }));
  }

  /** Whether anything is at `path`. */
  async exists(path: string, options: CallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, options);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** The entries under a directory, `depth` levels deep (1..16, default 1). */
  async list(path: string, options: CallOptions & { depth?: number } = {}): Promise<Entry[]> {
    const d = await this.client.json<{ entries?: Entry[] }>("GET", this.path + "/list", {
      query: { path, depth: options.depth }, signal: options.signal,
    });
    return (d?.entries ?? []).map(entry);
  }

  /** Make a directory, and its parents unless `parents: false`. */
  async mkdir(path: string, options: WriteOptions & { parents?: boolean } = {}): Promise<Entry> {
    return entry(await this.client.json("POST", this.path + "/mkdir", {
      json: { path, parents: options.parents ?? true, mode: mode(options.mode), user: options.user },
      signal: options.signal,
    }));
  }

  /** Delete a file or an empty directory; `recursive` deletes a directory with what is in it. */
  async remove(path: string, options: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    await this.client.json("DELETE", this.path, {
      query: { path, recursive: options.recursive ? "true" : undefined }, signal: options.signal,
    });
  }

  /**
   * Watch a directory for changes; resolves once the watch is in place (a change made after
   * it is seen). It lives through a pause and resume of the sandbox (an "overflow" event then
   * says events may have been missed) and ends with `stop()` or when the path is removed.
   */
  async watchDir(path: string, onEvent: (ev: FilesystemEvent) => void, options: WatchOptions = {}): Promise<WatchHandle> {
    const stop = new AbortController();
    const signal = options.signal ? AbortSignal.any([options.signal, stop.signal]) : stop.signal;
    const resp = await this.client.request("GET", this.path + "/watch", {
      query: { path, recursive: options.recursive ? "true" : undefined }, signal, timeoutMs: null,
    });
    const root = path.length > 1 ? path.replace(/\/+$/, "") : path;
    const done = (async () => {
      for await (const d of ndjson(resp, `the watch of ${path}`, signal)) {
        const p = typeof d.path === "string" ? d.path : "";
        onEvent({
          type: String(d.type), path: p, isDir: d.is_dir === true,
          name: p.startsWith(root) ? p.slice(root.length).replace(/^\/+/, "") : p,
          ...(typeof d.reason === "string" ? { reason: d.reason } : {}),
        });
      }
    })().then(() => options.onExit?.(), (e: unknown) => {
      if (stop.signal.aborted) options.onExit?.();
      else options.onExit?.(e);
      throw e;
    });
    done.catch(() => {});
    return new WatchHandle(stop, done);
  }

  /** Move `from` to `to`. */
  async rename(from: string, to: string, options: CallOptions = {}): Promise<Entry> {
    return entry(await this.client.json("POST", this.path + "/rename", { json: { from, to }, signal: options.signal }));
  }
}
