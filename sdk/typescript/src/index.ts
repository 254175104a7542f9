/**
 * @cpuos/sdk: cpuos sandboxes from TypeScript. A sandbox is a microVM of
 * its own; the API is docs/api.md of the cpuos repository.
 */
export {
  type CodeContext, type CodeContextOptions, Execution, type ExecutionError, type Logs, Result, type RunCodeOptions,
} from "./code.js";
export { Client, DEFAULT_API_URL, type CallOptions, type ConnectionOptions, type Duration } from "./client.js";
export {
  AuthenticationError, BadRequestError, ConflictError, CpuosError, NotFoundError, QuotaError, SandboxError,
  TimeoutError,
} from "./errors.js";
export {
  type Entry, type FileData, Files, type FilesystemEvent, WatchHandle, type WatchOptions, type WriteOptions,
} from "./files.js";
export { type ExecResult, type OutputEvent, Process } from "./process.js";
export { Pty, type PtyCreateOptions, type PtyExit, PtyHandle, type PtySize } from "./pty.js";
export {
  Checkpoint, type Command, type ExecOptions, type NetworkPolicy, type RequestTransformation, Sandbox,
  type SandboxCreateOptions, type SandboxMetric, type StringMatcher,
} from "./sandbox.js";
