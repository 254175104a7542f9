// Seeds 000 and 004 as programs, unchanged, against a real cpuosd and a
// scripted OpenAI-compatible server over real HTTP: the model asks for one
// tool call and then answers with what the tool printed, so the answer the
// program prints shows the call ran in a sandbox and its output went back.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";

let server, baseURL;
const seen = [];

/** The scripted model: a tool call first, then the last tool result's stdout as the answer. */
function answer(body) {
  const last = body.messages.at(-1);
  const reply = (message, finish) => ({
    id: `chatcmpl-${seen.length}`, object: "chat.completion", created: Math.floor(Date.now() / 1000),
    model: body.model, choices: [{ index: 0, message, finish_reason: finish }],
    usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 },
  });
  if (last.role === "tool") {
    const out = JSON.parse(last.content);
    return reply({ role: "assistant", content: `answer: ${String(out.stdout).trim()} (exit ${out.exitCode})` }, "stop");
  }
  const tool = body.tools[0].function.name;
  const args = tool === "runPython"
    ? { code: "import random, collections\nrandom.seed(1)\n" +
              "c = collections.Counter(random.randint(1, 6) + random.randint(1, 6) for _ in range(10000))\n" +
              "print(c.most_common(1)[0][0])\n" }
    : { command: "node --version | cut -c1-3; echo tests pass" };
  return reply({ role: "assistant", content: null,
                 tool_calls: [{ id: "call_1", type: "function", function: { name: tool, arguments: JSON.stringify(args) } }] },
               "tool_calls");
}

before(async () => {
  server = createServer((req, res) => {
    let data = "";
    req.on("data", (d) => (data += d));
    req.on("end", () => {
      const body = JSON.parse(data);
      seen.push({ url: req.url, auth: req.headers.authorization, body });
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify(answer(body)));
    });
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  baseURL = `http://127.0.0.1:${server.address().port}/v1`;
});
after(() => server.close());

function run(script, env) {
  const path = fileURLToPath(new URL(`../${script}`, import.meta.url));
  const child = spawn(process.execPath, [path], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "", err = "";
  child.stdout.on("data", (d) => (out += d));
  child.stderr.on("data", (d) => (err += d));
  return new Promise((resolve) => {
    const t = setTimeout(() => { child.kill("SIGKILL"); resolve({ code: "killed after 180 s", out, err }); }, 180_000);
    child.on("exit", (code) => { clearTimeout(t); resolve({ code, out, err }); });
  });
}

test("seed 000: the runPython tool runs the model's script in a python sandbox", async () => {
  seen.length = 0;
  const r = await run("seed-000.mjs", { GPUOS_BASE_URL: baseURL, GPUOS_API_KEY: "sk-test" });
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, "answer: 7 (exit 0)\n");
  assert.equal(seen.length, 2);
  assert.deepEqual([seen[0].url, seen[0].auth, seen[0].body.model], ["/v1/chat/completions", "Bearer sk-test", "qwen3-32b"]);
  assert.equal(seen[0].body.tools[0].function.description,
               "Run a Python 3 script in an isolated sandbox. Files live in /work.");
});

test("seed 004: the shell tool runs through session.restricted() in a node sandbox, destroyed after", async () => {
  seen.length = 0;
  const r = await run("seed-004.mjs", { OPENAI_BASE_URL: baseURL, OPENAI_API_KEY: "sk-test" });
  assert.equal(r.code, 0, r.err);
  assert.equal(r.out, "answer: v22\ntests pass (exit 0)\n");
  assert.match(seen[0].body.messages.at(-1).content, /Run the tests\.\n\nSandbox:\ncpuos sandbox sbx_[0-9a-f]{16}/);
});
