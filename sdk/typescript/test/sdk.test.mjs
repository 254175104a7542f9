// @cpuos/sdk against a real cpuosd and real microVMs. The daemon comes from
// the environment (CPUOS_API_URL, CPUOS_API_KEY; CPUOS_TEST_KEY_B is a key of
// another account): tests/e2e/test_typescript.py starts it and runs this file.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import {
  AuthenticationError, BadRequestError, Checkpoint, ConflictError, CpuosError, NotFoundError, Sandbox,
  TimeoutError,
} from "../dist/index.js";

for (const v of ["CPUOS_API_URL", "CPUOS_API_KEY", "CPUOS_TEST_KEY_B"])
  if (!process.env[v]) throw new Error(`${v} is not set: run this through tests/e2e/test_typescript.py`);

const RUN = `ts-${process.pid}-${Date.now()}`; // this run's sandboxes, apart from any left over
const made = [];
async function make(options = {}) {
  const sbx = await Sandbox.create({ template: "base", timeout: "10m", ...options });
  made.push(sbx);
  return sbx;
}
after(async () => {
  await Promise.all(made.map((s) => s.kill().catch(() => {})));
});

describe("a python sandbox", () => {
  let sbx;
  before(async () => {
    sbx = await make({ template: "python", metadata: { suite: RUN } });
  });

  test("create reads the key and URL from the environment and returns a running sandbox", () => {
    assert.match(sbx.id, /^sbx_[0-9a-f]{16}$/);
    assert.equal(sbx.state, "running");
    assert.equal(sbx.template, "python");
    assert.deepEqual(sbx.metadata, { suite: RUN });
  });

  test("seed 000's tool body: files.write then exec", async () => {
    await sbx.files.write("/work/main.py", "import sys\nprint(sum(range(10)))\nprint('oops', file=sys.stderr)\n");
    const run = await sbx.exec("cd /work && python main.py", { timeout: "2m" });
    assert.deepEqual([run.exitCode, run.stdout, run.stderr], [0, "45\n", "oops\n"]);
    assert.equal(run.timedOut, false);
  });

  test("a non-zero exit resolves with its code", async () => {
    const run = await sbx.exec("echo out; echo err >&2; exit 3");
    assert.deepEqual([run.exitCode, run.stdout, run.stderr], [3, "out\n", "err\n"]);
  });

  test("an argv runs without a shell, with env, cwd and stdin", async () => {
    const run = await sbx.exec(["sh", "-c", 'printf "%s|%s|" "$A" "$(pwd)"; cat'],
                               { env: { A: "$HOME `x`" }, cwd: "/tmp", stdin: "in\n" });
    assert.equal(run.stdout, "$HOME `x`|/tmp|in\n");
  });

  test("binary files keep NUL, CR and high bytes, both ways", async () => {
    const bytes = new Uint8Array(256).map((_, i) => i);
    await sbx.files.write("/work/bin/all.bin", bytes);
    assert.deepEqual(await sbx.files.read("/work/bin/all.bin", { format: "bytes" }), bytes);
    const sum = await sbx.exec("sha256sum < /work/bin/all.bin | cut -c1-16");
    assert.equal(sum.stdout, "40aff2e9d2d8922e\n");
    const streamed = new ReadableStream({
      start(c) { c.enqueue(bytes.subarray(0, 100)); c.enqueue(bytes.subarray(100)); c.close(); },
    });
    const entry = await sbx.files.write("/work/bin/streamed.bin", streamed);
    assert.equal(entry.size, 256);
    const stream = await sbx.files.read("/work/bin/streamed.bin", { format: "stream" });
    const got = new Uint8Array(await new Response(stream).arrayBuffer());
    assert.deepEqual(got, bytes);
  });

  test("text round trip, stat, list, mkdir, rename, remove, exists", async () => {
    await sbx.files.write("/work/t/a.txt", "héllo\n");
    assert.equal(await sbx.files.read("/work/t/a.txt"), "héllo\n");
    const st = await sbx.files.stat("/work/t/a.txt");
    assert.deepEqual([st.type, st.size, st.name], ["file", 7, "a.txt"]);
    await sbx.files.mkdir("/work/t/sub");
    await sbx.files.rename("/work/t/a.txt", "/work/t/sub/b.txt");
    const names = (await sbx.files.list("/work/t", { depth: 2 })).map((e) => e.path).sort();
    assert.deepEqual(names, ["/work/t/sub", "/work/t/sub/b.txt"]);
    assert.equal(await sbx.files.exists("/work/t/a.txt"), false);
    await sbx.files.remove("/work/t", { recursive: true });
    assert.equal(await sbx.files.exists("/work/t"), false);
    await assert.rejects(sbx.files.read("/work/missing"), NotFoundError);
  });

  test("onStdout sees output while the command runs", async () => {
    const seen = [];
    const t0 = Date.now();
    const run = await sbx.exec("echo first; sleep 2; echo second", {
      onStdout: (d) => seen.push([d, Date.now() - t0]),
    });
    assert.equal(run.stdout, "first\nsecond\n");
    assert.equal(seen.map(([d]) => d).join(""), "first\nsecond\n");
    assert.ok(seen[0][1] < Date.now() - t0 - 1000, `the first chunk came at ${seen[0][1]} ms, not before the sleep`);
  });

  test("a command's own timeout throws TimeoutError with the partial result", async () => {
    const e = await sbx.exec("echo started; sleep 60", { timeout: 2 }).then(() => null, (x) => x);
    assert.ok(e instanceof TimeoutError, String(e));
    assert.equal(e.result.stdout, "started\n");
    assert.equal(e.result.timedOut, true);
  });

  test("an abort ends a foreground command at once and kills it in the guest", async () => {
    const t0 = Date.now();
    const e = await sbx.exec("sleep 47", { signal: AbortSignal.timeout(500) }).then(() => null, (x) => x);
    assert.equal(e?.name, "TimeoutError"); // the signal's reason, not a cpuos error
    assert.ok(!(e instanceof CpuosError));
    assert.ok(Date.now() - t0 < 5000, `settled after ${Date.now() - t0} ms`);
    let left = "";
    for (let i = 0; i < 50; i++) {
      left = (await sbx.exec("pgrep -x -f 'sleep 47' || true")).stdout;
      if (!left) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(left, "", "the aborted command still runs");
  });

  test("an aborted signal rejects before anything is sent", async () => {
    const ac = new AbortController();
    ac.abort(new Error("no"));
    await assert.rejects(sbx.files.write("/work/never", "x", { signal: ac.signal }), /no/);
    assert.equal(await sbx.files.exists("/work/never"), false);
  });

  test("a background process: streams, stdin, wait", async () => {
    const proc = await sbx.exec("cat; echo done >&2", { background: true });
    assert.ok(proc.pid > 0);
    assert.equal(proc.state, "running");
    const { stdout, stderr, exited } = proc.outputStreams();
    const outText = new Response(stdout).text();
    const errText = new Response(stderr).text();
    await proc.sendStdin("one\n");
    const w = proc.stdinStream().getWriter();
    await w.write(new TextEncoder().encode("two\n"));
    await w.close(); // end of file: cat ends
    const result = await exited;
    assert.deepEqual([result.exitCode, await outText, await errText], [0, "one\ntwo\n", "done\n"]);
    const again = await proc.wait({ timeout: "30s" });
    assert.deepEqual([again.exitCode, again.stdout], [0, "one\ntwo\n"]);
  });

  test("a killed process settles, and the list shows it", async () => {
    const proc = await sbx.exec("sleep 600", { background: true });
    const waiting = proc.wait();
    await proc.kill();
    const r = await waiting;
    assert.equal(r.exitCode, null);
    assert.equal(r.signal, 9);
    const listed = (await sbx.processes()).find((p) => p.pid === proc.pid);
    assert.equal(listed?.state, "exited");
    await assert.rejects(sbx.process(999999), NotFoundError);
  });

  test("wait with a timeout on a running process throws TimeoutError", async () => {
    const proc = await sbx.exec("sleep 600", { background: true });
    await assert.rejects(proc.wait({ timeout: 1 }), TimeoutError);
    await proc.kill();
  });

  test("list and connect", async () => {
    const listed = await Sandbox.list({ metadata: { suite: RUN }, state: "running" });
    assert.deepEqual(listed.map((s) => s.id), [sbx.id]);
    const again = await Sandbox.connect(sbx.id);
    assert.equal(again.sessionId, sbx.sessionId);
  });
});

describe("terminals", () => {
  test("pty.create: bytes out, keys in, resize, exit code; connect replays", async () => {
    const sbx = await make();
    let seen = new Uint8Array(0);
    const waiters = [];
    const onData = (d) => {
      const next = new Uint8Array(seen.length + d.length);
      next.set(seen);
      next.set(d, seen.length);
      seen = next;
      for (const w of [...waiters]) w();
    };
    const shows = (want) => Buffer.from(seen).includes(typeof want === "string" ? Buffer.from(want) : want);
    const waitFor = (text) => new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${text} never came: ${Buffer.from(seen).toString()}`)), 60000);
      const check = () => {
        if (!shows(text)) return;
        clearTimeout(timer);
        waiters.splice(waiters.indexOf(check), 1);
        resolve();
      };
      waiters.push(check);
      check();
    });
    const term = await sbx.pty.create({
      rows: 20, cols: 70, onData,
      cmd: "trap 'echo winch $(stty size)' WINCH; stty size; printf 'hi\\377\\n'; read l; echo got=$l; " +
           "while :; do sleep 0.1; done",
    });
    await waitFor("20 70");
    await waitFor(Buffer.from([0x68, 0x69, 0xff, 0x0d, 0x0a])); // bytes as written, not text
    await term.sendInput("typed\r");
    await waitFor("got=typed");
    await term.resize({ rows: 33, cols: 99 });
    await waitFor("winch 33 99");
    term.disconnect();
    const again = await sbx.pty.connect(term.pid, { onData: () => {} });
    assert.equal(await sbx.pty.kill(term.pid), true);
    const end = await again.wait();
    assert.equal(end.signal, 9);
    await assert.rejects(sbx.pty.resize(term.pid, { rows: 0, cols: 1 }), BadRequestError);
  });
});

describe("pause, resume, fork, checkpoints", () => {
  test("pause keeps files and processes, resume by session id", async () => {
    const sbx = await make();
    await sbx.files.write("/work/k", "kept\n");
    const proc = await sbx.exec("sleep 900", { background: true });
    const session = await sbx.pause();
    assert.match(session, /^ses_[0-9a-f]{16}$/);
    assert.equal((await Sandbox.connect(sbx.id)).state, "paused");
    const back = await Sandbox.resume(session);
    assert.equal(back.id, sbx.id);
    assert.equal(back.state, "running");
    assert.equal(await back.files.read("/work/k"), "kept\n");
    assert.equal((await back.process(proc.pid)).state, "running");
  });

  test("fork copies memory and disk; a checkpoint starts a new sandbox", async () => {
    const sbx = await make();
    await sbx.files.write("/work/k", "from the parent\n");
    const [child] = await sbx.fork(1);
    made.push(child);
    assert.equal(child.parent, sbx.id);
    assert.equal(await child.files.read("/work/k"), "from the parent\n");
    const name = `ts-${Date.now()}`;
    const ckp = await sbx.checkpoint(name);
    assert.equal((await Checkpoint.get(name)).id, ckp.id);
    await assert.rejects(sbx.checkpoint(name), ConflictError);
    const started = await make({ template: undefined, checkpoint: ckp });
    assert.equal(started.parent, ckp.id);
    assert.equal(await started.files.read("/work/k"), "from the parent\n");
    await ckp.delete();
    await assert.rejects(Checkpoint.get(name), NotFoundError);
  });
});

describe("networks and ports", () => {
  test("setNetwork replaces the policy and getNetwork reads it", async () => {
    const sbx = await make({ network: "deny-all" });
    assert.deepEqual(sbx.network, { mode: "deny-all" });
    const policy = { mode: "custom", allowedHosts: ["pypi.org"], deniedCIDRs: ["203.0.113.7/32"] };
    const kept = await sbx.setNetwork(policy);
    assert.deepEqual(kept.allowedHosts, ["pypi.org"]);
    assert.deepEqual((await sbx.getNetwork()).deniedCIDRs, ["203.0.113.7/32"]);
    await assert.rejects(sbx.setNetwork({ mode: "custom" }), BadRequestError);
  });

  test("url(port) reaches a server in the sandbox, with its token", async () => {
    const sbx = await make({ template: "python" });
    await sbx.files.write("/work/www/index.html", "hello from the guest\n");
    await sbx.exec("cd /work/www && python3 -m http.server 8000 --bind 0.0.0.0", { background: true });
    const url = sbx.url(8000);
    const [bare, query] = url.split("?");
    assert.equal(query, `cpuos_token=${sbx.trafficToken}`);
    // A program sends the token as a header; a browser's first visit trades the query for a cookie.
    const token = { "cpuos-traffic-token": sbx.trafficToken };
    let body = "";
    for (let i = 0; i < 100 && !body; i++) {
      const r = await fetch(bare, { headers: token }).catch(() => null);
      if (r?.status === 200) body = await r.text();
      else await new Promise((res) => setTimeout(res, 300));
    }
    assert.equal(body, "hello from the guest\n");
    const visit = await fetch(url, { redirect: "manual" });
    assert.equal(visit.status, 302);
    assert.match(visit.headers.get("set-cookie") ?? "", /cpuos_token=/);
    assert.equal((await fetch(bare)).status, 401);
    assert.throws(() => sbx.url(0), RangeError);
  });
});

describe("the node template", () => {
  test("seed 000's preview flow: pnpm dev --port 3000 in the background, then sbx.url(3000)", async () => {
    const sbx = await make({ template: "node" });
    const v = await sbx.exec("node --version; pnpm --version; npm config get cache; pnpm store path");
    const [node, pnpm, npmCache, store] = v.stdout.trim().split("\n");
    assert.match(node, /^v22\./, v.stderr);
    assert.match(pnpm, /^10\./);
    assert.equal(npmCache, "/home/user/.npm");
    assert.match(store, /^\/home\/user\/\.local\/share\/pnpm\/store/);
    assert.equal((await sbx.exec("test -w /home/user/.npm && test -w /home/user/.local/share/pnpm/store")).exitCode, 0);
    await sbx.files.write("/work/app/package.json", JSON.stringify({ name: "app", private: true,
                                                                     scripts: { dev: "node server.js" } }));
    await sbx.files.write("/work/app/server.js", `
      const port = Number(process.argv[process.argv.indexOf("--port") + 1]);
      require("http").createServer((q, r) => r.end("preview on " + port + "\\n")).listen(port, "0.0.0.0");`);
    const dev = await sbx.exec("pnpm dev --port 3000", { background: true, cwd: "/work/app" });
    const [bare] = sbx.url(3000).split("?");
    let body = "";
    for (let i = 0; i < 200 && !body; i++) {
      const r = await fetch(bare, { headers: { "cpuos-traffic-token": sbx.trafficToken } }).catch(() => null);
      if (r?.status === 200) body = await r.text();
      else await new Promise((res) => setTimeout(res, 300));
    }
    assert.equal(body, "preview on 3000\n", (await dev.info()).state);
  });
});

describe("errors", () => {
  test("typed errors with the API's status and code", async () => {
    const nf = await Sandbox.connect("sbx_0000000000000000").catch((e) => e);
    assert.ok(nf instanceof NotFoundError && nf.status === 404 && nf.code === "not_found", String(nf));
    await assert.rejects(Sandbox.create({ template: "no-such-template" }), BadRequestError);
    await assert.rejects(Sandbox.list({ apiKey: "cpuos_wrong" }), AuthenticationError);
    const unreachable = await Sandbox.list({ apiUrl: "http://127.0.0.1:9" }).catch((e) => e);
    assert.ok(unreachable instanceof CpuosError && /cannot reach cpuosd/.test(unreachable.message));
  });

  test("another account's sandbox is not found, and a stopped one is a conflict", async () => {
    const sbx = await make();
    await assert.rejects(Sandbox.connect(sbx.id, { apiKey: process.env.CPUOS_TEST_KEY_B }), NotFoundError);
    await sbx.kill();
    assert.equal(sbx.state, "stopped");
    await assert.rejects(sbx.exec("true"), ConflictError);
  });
});

test("a script's process ends by itself after its last line", async () => {
  const script = fileURLToPath(new URL("./fixtures/ends.mjs", import.meta.url));
  const child = spawn(process.execPath, [script], { stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  child.stdout.on("data", (d) => (out += d));
  const code = await new Promise((resolve) => {
    const t = setTimeout(() => { child.kill("SIGKILL"); resolve("still running 60 s later"); }, 60_000);
    child.on("exit", (c) => { clearTimeout(t); resolve(c); });
  });
  assert.equal(code, 0, out);
  assert.match(out, /last line\n$/);
});
