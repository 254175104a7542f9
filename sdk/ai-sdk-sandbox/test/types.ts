// Type test (tsc --noEmit, in the build): the provider and its sessions are
// what the published ai@7 and @ai-sdk/harness take.
import type { HarnessV1NetworkSandboxSession, HarnessV1SandboxProvider } from "@ai-sdk/harness";
import type { Experimental_SandboxSession } from "ai";

import { createCpuosNetworkSandboxSession, createCpuosSandbox } from "../src/index.js";

export async function check(): Promise<void> {
  const provider: HarnessV1SandboxProvider = createCpuosSandbox({ template: "node" });
  const session: HarnessV1NetworkSandboxSession = await createCpuosNetworkSandboxSession();
  const ours = await createCpuosNetworkSandboxSession();
  const forTools: Experimental_SandboxSession = ours.restricted(); // ai@7's newest contract, stat and all
  const whole: Experimental_SandboxSession = ours;
  const withStdin = await forTools.spawn({ command: "cat", stdin: true });
  const writer: WritableStream<Uint8Array> = withStdin.stdin;
  void [provider, session, whole, writer];
}
