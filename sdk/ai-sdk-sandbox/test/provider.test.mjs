// @cpuos/ai-sdk-sandbox against a real cpuosd and real microVMs: the
// checklist of ../shared/reference/aisdk-sandbox.md §6 (B: the tool-facing
// session, C: the harness session), the AI SDK's own loop with a scripted
// model, and a script that ends by itself. tests/e2e/test_typescript.py
// runs it with CPUOS_API_URL and CPUOS_API_KEY set.
import assert from "node:assert/strict";
import { spawn as spawnChild } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { HarnessCapabilityUnsupportedError, HarnessSandboxAuthenticationError } from "@ai-sdk/harness";
import { generateText, isStepCount, stepCountIs, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";

import { Sandbox } from "@cpuos/sdk";

import {
  createCpuosNetworkSandboxSession, createCpuosSandbox, resumeCpuosNetworkSandboxSession,
} from "../dist/index.js";

for (const v of ["CPUOS_API_URL", "CPUOS_API_KEY"])
  if (!process.env[v]) throw new Error(`${v} is not set: run this through tests/e2e/test_typescript.py`);

const sessions = [];
async function open(settings = {}) {
  const s = await createCpuosNetworkSandboxSession({ template: "base", timeout: "10m", ...settings });
  sessions.push(s);
  return s;
}
after(async () => {
  await Promise.all(sessions.map((s) => s.destroy().catch(() => {})));
});

const text = (stream) => new Response(stream).text();
const SURFACE = ["deleteFile", "description", "listDirectory", "readBinaryFile", "readFile", "readTextFile", "run",
                 "spawn", "stat", "writeBinaryFile", "writeFile", "writeTextFile"];

describe("the tool-facing session", () => {
  let session, sbx;
  before(async () => {
    session = await open();
    sbx = session.restricted();
  });

  test("restricted() is frozen and holds only the description, the file methods, run and spawn", () => {
    assert.ok(Object.isFrozen(sbx));
    assert.deepEqual(Object.keys(sbx).sort(), SURFACE);
    for (const k of ["stop", "destroy", "id", "restricted", "setNetworkPolicy", "ports"]) assert.ok(!(k in sbx), k);
    assert.match(sbx.description, new RegExp(session.id));
    assert.ok(sbx.description.includes(session.defaultWorkingDirectory));
  });

  test("run: pwd is the absolute default directory, cd does not last, a non-zero exit resolves", async () => {
    const pwd = await sbx.run({ command: "pwd" });
    assert.deepEqual(pwd, { exitCode: 0, stdout: session.defaultWorkingDirectory + "\n", stderr: "" });
    assert.ok(session.defaultWorkingDirectory.startsWith("/"));
    await sbx.run({ command: "mkdir -p sub && cd sub" });
    assert.equal((await sbx.run({ command: "pwd" })).stdout, session.defaultWorkingDirectory + "\n");
    assert.equal((await sbx.run({ command: "pwd", workingDirectory: "sub" })).stdout,
                 session.defaultWorkingDirectory + "/sub\n");
    assert.deepEqual(await sbx.run({ command: "echo out; echo err >&2; exit 7" }),
                     { exitCode: 7, stdout: "out\n", stderr: "err\n" });
  });

  test("run: env is data, never shell text, and wins over the defaults", async () => {
    const r = await sbx.run({ command: 'mkdir -p "$WORK_DIR" && printf %s "$X"', env: { X: "$(id -u) `id`", WORK_DIR: "w d" } });
    assert.deepEqual([r.exitCode, r.stdout], [0, "$(id -u) `id`"]);
    assert.equal((await sbx.stat({ path: "w d" })).type, "directory");
  });

  test("binary files keep NUL, CR and high bytes; a stream writes; parents are made", async () => {
    const bytes = new Uint8Array([0, 13, 10, 255, 128, 0x7f, 0xc3, 0x28, 0]);
    await sbx.writeBinaryFile({ path: "bin/x/raw.bin", content: bytes });
    assert.deepEqual(await sbx.readBinaryFile({ path: "bin/x/raw.bin" }), bytes);
    const stream = new ReadableStream({ start(c) { c.enqueue(bytes); c.enqueue(bytes); c.close(); } });
    await sbx.writeFile({ path: "/tmp/streamed.bin", content: stream });
    const back = new Uint8Array(await new Response(await sbx.readFile({ path: "/tmp/streamed.bin" })).arrayBuffer());
    assert.deepEqual(back, new Uint8Array([...bytes, ...bytes]));
    // the path a command prints works in the file methods (one base directory)
    const printed = (await sbx.run({ command: "realpath bin/x/raw.bin" })).stdout.trim();
    assert.deepEqual(await sbx.readBinaryFile({ path: printed }), bytes);
  });

  test("text files: encodings, and 1-based inclusive line ranges over any line ending", async () => {
    await sbx.writeTextFile({ path: "t.txt", content: "one\r\ntwo\r\nthree\r\nfour" });
    assert.equal(await sbx.readTextFile({ path: "t.txt", startLine: 2, endLine: 3 }), "two\r\nthree");
    assert.equal(await sbx.readTextFile({ path: "t.txt", startLine: 4, endLine: 99 }), "four");
    await sbx.writeTextFile({ path: "l1.txt", content: "é", encoding: "latin1" });
    assert.deepEqual(await sbx.readBinaryFile({ path: "l1.txt" }), new Uint8Array([0xe9]));
    assert.equal(await sbx.readTextFile({ path: "l1.txt", encoding: "latin1" }), "é");
  });

  test("missing is null; a directory is refused where a file is wanted", async () => {
    for (const m of ["readFile", "readBinaryFile", "readTextFile", "stat", "listDirectory"])
      assert.equal(await sbx[m]({ path: "no/such" }), null, m);
    assert.equal(await sbx.deleteFile({ path: "no/such" }), false);
    await sbx.run({ command: "mkdir -p adir" });
    await assert.rejects(sbx.writeTextFile({ path: "adir", content: "x" }));
    await assert.rejects(sbx.deleteFile({ path: "adir" }));
    await assert.rejects(sbx.readBinaryFile({ path: "adir" }));
    await sbx.writeTextFile({ path: "afile", content: "x" });
    await assert.rejects(sbx.listDirectory({ path: "afile" }));
  });

  test("stat follows links, listDirectory shows them, deleteFile deletes the link itself", async () => {
    await sbx.run({ command: "mkdir -p ls && echo 12345 > ls/f && ln -sf f ls/l && ln -sfn /tmp ls/d" });
    assert.deepEqual(await sbx.stat({ path: "ls/l" }), { type: "file", size: 6 });
    assert.equal((await sbx.stat({ path: "ls/d" })).type, "directory");
    const list = (await sbx.listDirectory({ path: "ls" })).sort((a, b) => a.name.localeCompare(b.name));
    assert.deepEqual(list, [{ name: "d", type: "symlink" }, { name: "f", type: "file" }, { name: "l", type: "symlink" }]);
    assert.equal(await sbx.deleteFile({ path: "ls/l" }), true);
    assert.equal(await sbx.stat({ path: "ls/l" }), null);
    assert.equal((await sbx.stat({ path: "ls/f" })).size, 6);
  });

  test("spawn streams as the process writes, and wait gives its exit", async () => {
    const p = await sbx.spawn({ command: "echo a; sleep 2; echo b >&2; exit 3" });
    assert.ok(!("stdin" in p));
    const reader = p.stdout.getReader();
    const t0 = Date.now();
    const first = new TextDecoder().decode((await reader.read()).value);
    assert.equal(first, "a\n");
    assert.ok(Date.now() - t0 < 1800, `the first chunk came after ${Date.now() - t0} ms`);
    const drain = async () => {
      let all = "";
      for (let c = await reader.read(); !c.done; c = await reader.read()) all += new TextDecoder().decode(c.value);
      return all;
    };
    const [rest, err, done] = await Promise.all([drain(), text(p.stderr), p.wait()]);
    assert.deepEqual([rest, err, done], ["", "b\n", { exitCode: 3 }]);
  });

  test("spawn without stdin: a command that reads it gets end of file, not a wait", async () => {
    const p = await sbx.spawn({ command: "cat; echo read-eof" });
    assert.deepEqual([await text(p.stdout), await p.wait()], ["read-eof\n", { exitCode: 0 }]);
    assert.ok(Number.isInteger(p.pid) && p.pid > 1, String(p.pid));
  });

  test("spawn with stdin: close() is end of file, the process goes on", async () => {
    const p = await sbx.spawn({ command: "cat; echo after-eof", stdin: true });
    const w = p.stdin.getWriter();
    await w.write(new TextEncoder().encode("fed\n"));
    await w.close();
    assert.deepEqual([await text(p.stdout), await p.wait()], ["fed\nafter-eof\n", { exitCode: 0 }]);
  });

  test("kill is idempotent and settles wait; an abort kills and wait rejects with its reason", async () => {
    const p = await sbx.spawn({ command: "sleep 300" });
    await p.kill();
    await p.kill();
    assert.equal((await p.wait()).exitCode, 137);
    const ac = new AbortController();
    const q = await sbx.spawn({ command: "sleep 301", abortSignal: ac.signal });
    const reason = new Error("stop it");
    ac.abort(reason);
    await assert.rejects(q.wait(), (e) => e === reason);
    assert.equal((await sbx.run({ command: "pgrep -f 'sleep 30[01]' || true" })).stdout, "");
  });

  test("an abort settles run at once and kills the command; an aborted signal sends nothing", async () => {
    const t0 = Date.now();
    await assert.rejects(sbx.run({ command: "sleep 41", abortSignal: AbortSignal.timeout(300) }));
    assert.ok(Date.now() - t0 < 3000, `run settled after ${Date.now() - t0} ms`);
    let left = "x";
    for (let i = 0; i < 30 && left; i++) {
      left = (await sbx.run({ command: "pgrep -x -f 'sleep 41' || true" })).stdout;
      if (left) await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(left, "");
    const ac = new AbortController();
    ac.abort();
    await assert.rejects(sbx.writeTextFile({ path: "never.txt", content: "x", abortSignal: ac.signal }));
    await assert.rejects(sbx.spawn({ command: "touch never2", abortSignal: ac.signal }));
    assert.equal(await sbx.stat({ path: "never.txt" }), null);
    assert.equal(await sbx.stat({ path: "never2" }), null);
  });
});

describe("the harness session", () => {
  test("ports: unexposed ones throw the AI SDK's error; exposed ones give a URL and its header", async () => {
    const s = await open({ template: "python" });
    const e = await s.getPortEndpoint({ port: 8000 }).catch((x) => x);
    assert.ok(HarnessCapabilityUnsupportedError.isInstance(e), String(e));
    await s.setPorts([8000]);
    assert.deepEqual(s.ports, [8000]);
    const ep = await s.getPortEndpoint({ port: 8000 });
    assert.match(ep.url, /^http:\/\/127\.0\.0\.1:\d+\/sbx_[0-9a-f]+\/8000\/$/);
    assert.equal((await s.getPortEndpoint({ port: 8000, protocol: "ws" })).url, ep.url.replace(/^http/, "ws"));
    assert.ok(HarnessCapabilityUnsupportedError.isInstance(
      await s.getPortEndpoint({ port: 8000, protocol: "https" }).catch((x) => x)));
    await s.writeTextFile({ path: "/tmp/www/index.html", content: "served\n" });
    await s.spawn({ command: "cd /tmp/www && exec python3 -m http.server 8000 --bind 0.0.0.0" });
    let body = "";
    for (let i = 0; i < 100 && !body; i++) {
      const r = await fetch(ep.url, { headers: ep.headers }).catch(() => null);
      if (r?.status === 200) body = await r.text();
      else await new Promise((res) => setTimeout(res, 300));
    }
    assert.equal(body, "served\n");
  });

  test("setNetworkPolicy changes a running session's egress on the host", async () => {
    const s = await open({ networkPolicy: { mode: "deny-all" } });
    await s.setNetworkPolicy({ mode: "custom", allowedHosts: ["registry.npmjs.org"], deniedCIDRs: ["203.0.113.0/24"] });
    const p = await s.sandbox.getNetwork();
    assert.deepEqual([p.mode, p.allowedHosts, p.deniedCIDRs], ["custom", ["registry.npmjs.org"], ["203.0.113.0/24"]]);
    assert.match(s.description, /registry\.npmjs\.org/);
    await assert.rejects(s.setNetworkPolicy({ mode: "custom", allowedHosts: ["bad host"] }));
  });

  test("stop pauses, resume by id keeps files and processes, destroy ends a stopped one", async () => {
    const s = await open();
    await s.writeTextFile({ path: "kept.txt", content: "kept\n" });
    await s.spawn({ command: "sleep 900" });
    await s.stop();
    await s.stop(); // idempotent
    assert.equal((await s.sandbox.info()).state, "paused");
    const back = await resumeCpuosNetworkSandboxSession({ sandboxId: s.id });
    assert.equal(back.id, s.id);
    assert.equal(await back.readTextFile({ path: "kept.txt" }), "kept\n");
    assert.match((await back.run({ command: "pgrep -x sleep" })).stdout, /^\d+\n$/);
    await back.stop();
    await back.destroy();
    assert.equal((await s.sandbox.info()).state, "stopped");
    await back.destroy();
  });

  test("the provider: a session id resumes from anywhere; onFirstCreate runs once per identity", async () => {
    const provider = createCpuosSandbox({ template: "base", timeout: "10m" });
    assert.equal(provider.specificationVersion, "harness-sandbox-v1");
    assert.equal(provider.providerId, "cpuos-sandbox");
    const sid = `t-${Date.now()}`;
    const a = await provider.createSession({ sessionId: sid });
    sessions.push(a);
    await a.writeTextFile({ path: "mark", content: sid });
    await a.stop();
    const b = await provider.resumeSession({ sessionId: sid });
    assert.equal(b.id, a.id);
    assert.equal(await b.readTextFile({ path: "mark" }), sid);
    await assert.rejects(provider.resumeSession({ sessionId: "no-such-session" }));

    let ran = 0;
    const identity = `setup ${sid}`;
    const onFirstCreate = async (view) => {
      ran++;
      assert.ok(!("stop" in view));
      await view.writeTextFile({ path: "bootstrapped", content: "yes" });
    };
    const first = await provider.createSession({ identity, onFirstCreate });
    const second = await provider.createSession({ identity, onFirstCreate });
    sessions.push(first, second);
    assert.equal(ran, 1);
    assert.notEqual(first.id, second.id);
    assert.equal(await second.readTextFile({ path: "bootstrapped" }), "yes");
  });

  test("a wrong key is the AI SDK's authentication error", async () => {
    const e = await createCpuosNetworkSandboxSession({ apiKey: "cpuos_wrong" }).catch((x) => x);
    assert.ok(HarnessSandboxAuthenticationError.isInstance(e), String(e));
  });
});

describe("in the AI SDK's loop", () => {
  const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: undefined, cacheWrite: undefined },
                  outputTokens: { total: 1, text: 1, reasoning: undefined } };
  const call = (command) => ({
    content: [{ type: "tool-call", toolCallId: "c1", toolName: "shell", input: JSON.stringify({ command }) }],
    finishReason: { unified: "tool-calls", raw: undefined }, usage, warnings: [],
  });
  const done = { content: [{ type: "text", text: "done" }], finishReason: { unified: "stop", raw: undefined }, usage,
                 warnings: [] };
  const shell = tool({
    description: ({ experimental_sandbox }) => `Run a command. ${experimental_sandbox?.description ?? ""}`,
    inputSchema: z.object({ command: z.string() }),
    execute: ({ command }, { experimental_sandbox, abortSignal }) => experimental_sandbox.run({ command, abortSignal }),
  });

  test("generateText hands the tool the sandbox, and the command runs in it", async () => {
    const s = await open();
    const model = new MockLanguageModelV4({ doGenerate: [call("uname -n; echo hi > made.txt"), done] });
    const r = await generateText({ model, tools: { shell }, experimental_sandbox: s.restricted(),
                                   stopWhen: isStepCount(5), prompt: "go" });
    assert.equal(r.text, "done");
    const out = r.steps[0].toolResults[0].output;
    assert.deepEqual([out.exitCode, out.stdout], [0, `${s.id.slice(4)}\n`]);
    assert.equal(await s.readTextFile({ path: "made.txt" }), "hi\n");
    assert.match(model.doGenerateCalls[0].tools[0].description, new RegExp(s.id));
  });

  test("seed 000's runPython tool over @cpuos/sdk, with the model scripted", async () => {
    const sbx = await Sandbox.create({ template: "python", timeout: "30m" });
    try {
      const runPython = tool({
        description: "Run a Python 3 script in an isolated sandbox. Files live in /work.",
        inputSchema: z.object({ code: z.string() }),
        execute: async ({ code }) => {
          await sbx.files.write("/work/main.py", code);
          const run = await sbx.exec("cd /work && python main.py", { timeout: "2m" });
          return { exitCode: run.exitCode, stdout: run.stdout.slice(-4000), stderr: run.stderr.slice(-2000) };
        },
      });
      const code = "import random, collections\nrandom.seed(2)\n" +
        "c = collections.Counter(random.randint(1, 6) + random.randint(1, 6) for _ in range(10000))\n" +
        "print(c.most_common(1)[0][0])\n";
      const model = new MockLanguageModelV4({ doGenerate: [
        { ...call(""), content: [{ type: "tool-call", toolCallId: "c1", toolName: "runPython",
                                   input: JSON.stringify({ code }) }] },
        { ...done, content: [{ type: "text", text: "The most common sum is 7." }] },
      ] });
      const { text: answer, steps } = await generateText({
        model, tools: { runPython }, stopWhen: stepCountIs(8),
        prompt: "Simulate 10,000 rolls of two dice and report the most common sum.",
      });
      assert.equal(answer, "The most common sum is 7.");
      assert.deepEqual(steps[0].toolResults[0].output, { exitCode: 0, stdout: "7\n", stderr: "" });
      await sbx.pause();
      assert.equal((await sbx.info()).state, "paused");
    } finally {
      await sbx.kill();
    }
  });

  test("timeout.toolMs aborts a run that takes too long, and the loop goes on", async () => {
    const s = await open();
    const model = new MockLanguageModelV4({ doGenerate: [call("sleep 20"), done] });
    const t0 = Date.now();
    const r = await generateText({ model, tools: { shell }, experimental_sandbox: s.restricted(),
                                   timeout: { toolMs: 500 }, stopWhen: isStepCount(5), prompt: "go" });
    assert.ok(Date.now() - t0 < 8000, `took ${Date.now() - t0} ms`);
    assert.equal(r.text, "done");
    const parts = r.steps[0].content.filter((p) => p.type === "tool-error");
    assert.equal(parts.length, 1, JSON.stringify(r.steps[0].content));
  });
});

test("a script's process ends by itself after destroy()", async () => {
  const script = fileURLToPath(new URL("./fixtures/ends.mjs", import.meta.url));
  const child = spawnChild(process.execPath, [script], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const code = await new Promise((resolve) => {
    const t = setTimeout(() => { child.kill("SIGKILL"); resolve("still running 60 s later"); }, 60_000);
    child.on("exit", (c) => { clearTimeout(t); resolve(c); });
  });
  assert.equal(code, 0, out);
  assert.match(out, /last line\n$/);
});
