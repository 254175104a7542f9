/**
 * @cpuos/ai-sdk-sandbox: cpuos microVMs behind AI SDK 7's sandbox
 * interfaces. `createCpuosNetworkSandboxSession()` gives one session (pass
 * `session.restricted()` as `experimental_sandbox`); `createCpuosSandbox()`
 * is the provider HarnessAgent takes.
 */
import { HarnessCapabilityUnsupportedError, HarnessSandboxAuthenticationError } from "@ai-sdk/harness";
import type { HarnessV1NetworkPolicy, HarnessV1SandboxProvider } from "@ai-sdk/harness";
import type { Experimental_SandboxSession as SandboxSession } from "@ai-sdk/provider-utils";
import {
  AuthenticationError, Checkpoint, ConflictError, NotFoundError, Sandbox, type SandboxCreateOptions,
} from "@cpuos/sdk";
import { createHash } from "node:crypto";

import { CpuosNetworkSandboxSession, PROVIDER_ID, toCpuosPolicy } from "./session.js";

export { CpuosNetworkSandboxSession, CpuosSandboxSession, PROVIDER_ID } from "./session.js";

/** What a session's sandbox is created with, as @cpuos/sdk spells it (template default "node",
 * timeout "30m"), plus the AI SDK's network policy and the ports the session exposes. */
export type CpuosSandboxSettings = Pick<SandboxCreateOptions, "apiKey" | "apiUrl" | "template" | "timeout" | "vcpus" |
  "memoryMb" | "diskMb" | "env" | "metadata" | "public" | "secrets"> & {
  /** An OCI image to start from ('node:22-alpine', 'ghcr.io/org/app:1'): the daemon pulls it through the host
   * the first time (or uses the account's template pulled from it) and starts the sandbox from it. Wins over
   * `template`. */
  image?: string;
  /** Its egress, enforced on the host (default: the daemon's --net-default). */
  networkPolicy?: HarnessV1NetworkPolicy;
  /** Ports getPortEndpoint hands out (cpuos serves every port; this says which the session exposes). */
  ports?: readonly number[];
};

const SESSION_KEY = "ai-sdk-session";

function authFailure(e: unknown): unknown {
  return e instanceof AuthenticationError
    ? new HarnessSandboxAuthenticationError({ message: e.message, sandboxProviderId: PROVIDER_ID, cause: e })
    : e;
}

/** Where commands start, and what runs them: the sandbox says (the harness needs an absolute path; an image
 * such as node:22-alpine has sh and no bash). */
async function session(sbx: Sandbox, settings: CpuosSandboxSettings, abortSignal?: AbortSignal) {
  const r = await sbx.exec("pwd; command -v bash >/dev/null 2>&1 && echo bash || echo sh", { signal: abortSignal });
  const [dir = "", shell] = r.stdout.trim().split("\n");
  if (r.exitCode !== 0 || !dir.startsWith("/")) throw new Error(`cpuos sandbox ${sbx.id}: pwd gave '${dir}'`);
  return new CpuosNetworkSandboxSession(sbx, dir, { ports: settings.ports, shell: shell === "sh" ? "sh" : "bash" });
}

/** The session of a sandbox just made; one whose setup failed is not left behind. */
async function fresh<T>(sbx: Sandbox, setup: () => Promise<T>): Promise<T> {
  try {
    return await setup();
  } catch (e) {
    await sbx.kill().catch(() => {});
    throw e;
  }
}

function createOptions(settings: CpuosSandboxSettings, extra: Partial<SandboxCreateOptions> = {}): SandboxCreateOptions {
  return {
    apiKey: settings.apiKey, apiUrl: settings.apiUrl, template: settings.image ?? settings.template ?? "node",
    timeout: settings.timeout ?? "30m", vcpus: settings.vcpus, memoryMb: settings.memoryMb, diskMb: settings.diskMb,
    env: settings.env,
    network: settings.networkPolicy ? toCpuosPolicy(settings.networkPolicy) : undefined,
    public: settings.public, secrets: settings.secrets, ...extra,
    metadata: { ...settings.metadata, ...extra.metadata },
  };
}

/** A new sandbox, one session. Nothing to resume needs more than its `id`. */
export async function createCpuosNetworkSandboxSession(
  settings: CpuosSandboxSettings & { abortSignal?: AbortSignal } = {},
): Promise<CpuosNetworkSandboxSession> {
  try {
    const sbx = await Sandbox.create({ ...createOptions(settings), signal: settings.abortSignal });
    return await fresh(sbx, () => session(sbx, settings, settings.abortSignal));
  } catch (e) {
    throw authFailure(e);
  }
}

/** The session of a sandbox by its id (or the session id its pause gave), resumed if it was stopped. */
export async function resumeCpuosNetworkSandboxSession(
  settings: CpuosSandboxSettings & { sandboxId: string; abortSignal?: AbortSignal },
): Promise<CpuosNetworkSandboxSession> {
  try {
    const sbx = await Sandbox.resume(settings.sandboxId, {
      apiKey: settings.apiKey, apiUrl: settings.apiUrl, signal: settings.abortSignal,
    });
    return await session(sbx, settings, settings.abortSignal);
  } catch (e) {
    throw authFailure(e);
  }
}

/** A session over a sandbox the caller made and owns: stop() and destroy() leave it alone. */
export async function createCpuosSandboxSessionFromNative(sandbox: Sandbox, settings: CpuosSandboxSettings = {}) {
  const s = await session(sandbox, settings);
  return new CpuosNetworkSandboxSession(sandbox, s.defaultWorkingDirectory,
                                       { ports: settings.ports, owned: false, shell: s.shell });
}

/** The sandbox a harness session id names (in its metadata), if one is running or paused. */
async function bySessionId(settings: CpuosSandboxSettings, sessionId: string, signal?: AbortSignal) {
  const found = await Sandbox.list({ apiKey: settings.apiKey, apiUrl: settings.apiUrl, signal,
                                     metadata: { [SESSION_KEY]: sessionId } });
  return found.find((s) => s.state === "running" || s.state === "paused");
}

/** A checkpoint's name for an identity: the characters cpuos allows, whatever the identity holds. */
const identityCheckpoint = (identity: string) =>
  `ai-sdk-${createHash("sha256").update(identity).digest("hex").slice(0, 32)}`;

/**
 * The provider HarnessAgent takes. A `sessionId` is kept in the sandbox's
 * metadata, so `resumeSession` finds it from any process. With `identity`
 * and `onFirstCreate`, the first session of an identity runs onFirstCreate
 * and is checkpointed; later ones start from that checkpoint (memory,
 * disk and processes), so the setup runs once.
 */
export function createCpuosSandbox(settings: CpuosSandboxSettings = {}): HarnessV1SandboxProvider {
  const resumeSession = async ({ sessionId, abortSignal }: { sessionId: string; abortSignal?: AbortSignal }) => {
    try {
      const known = /^(sbx|ses)_[0-9a-f]{16}$/.test(sessionId) ? sessionId
        : (await bySessionId(settings, sessionId, abortSignal))?.id;
      if (!known) throw new NotFoundError(`no cpuos sandbox holds the session '${sessionId}'`, { status: 404 });
      return await resumeCpuosNetworkSandboxSession({ ...settings, sandboxId: known, abortSignal });
    } catch (e) {
      throw authFailure(e);
    }
  };
  return {
    specificationVersion: "harness-sandbox-v1",
    providerId: PROVIDER_ID,
    createSession: async ({ sessionId, abortSignal, identity, onFirstCreate } = {}) => {
      try {
        if (sessionId && (await bySessionId(settings, sessionId, abortSignal)))
          return await resumeSession({ sessionId, abortSignal });
        const metadata: Record<string, string> = sessionId ? { [SESSION_KEY]: sessionId } : {};
        if (!identity || !onFirstCreate)
          return await createCpuosNetworkSandboxSession({ ...settings, metadata: { ...settings.metadata, ...metadata },
                                                          abortSignal });
        const name = identityCheckpoint(identity);
        const opts = { apiKey: settings.apiKey, apiUrl: settings.apiUrl, signal: abortSignal };
        const ckp = await Checkpoint.get(name, opts).catch((e) => {
          if (e instanceof NotFoundError) return null;
          throw e;
        });
        if (ckp) {
          const sbx = await Sandbox.create({ ...createOptions(settings, { metadata }), template: undefined,
                                             checkpoint: ckp, signal: abortSignal });
          return await fresh(sbx, () => session(sbx, settings, abortSignal));
        }
        const first = await createCpuosNetworkSandboxSession({ ...settings, metadata: { ...settings.metadata, ...metadata },
                                                               abortSignal });
        return await fresh(first.sandbox, async () => {
          await onFirstCreate(first.restricted(), { abortSignal });
          await first.sandbox.checkpoint(name, { signal: abortSignal }).catch((e) => {
            if (!(e instanceof ConflictError)) throw e; // another session of the identity saved it first
          });
          return first;
        });
      } catch (e) {
        throw authFailure(e);
      }
    },
    resumeSession,
  };
}

/** For capabilities cpuos lacks: the AI SDK's own error, never a silent no-op. */
export { HarnessCapabilityUnsupportedError };
export type { SandboxSession };
