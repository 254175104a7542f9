// @cpuos/sdk against a local fake of the daemon's HTTP side, no VM: what the
// SDK sends and how it reads whole and streamed answers (runCode and its
// contexts). tests/e2e/test_typescript.py runs this file without a daemon.
import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  BadRequestError, ConflictError, CpuosError, Execution, NotFoundError, QuotaError, Result, Sandbox, SandboxError,
} from "../dist/index.js";

const SBX = "/v1/sandboxes/sbx_1";
const CODE = SBX + "/code";
const CONTEXTS = CODE + "/contexts";
const PNG = Uint8Array.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 255, 128, 7]);
const b64 = (bytes) => Buffer.from(bytes).toString("base64");
const EXECUTION = {
  context: "default", language: "python", execution_count: 3,
  results: [{ is_main_result: false, text: "<Figure size 640x480 with 1 Axes>", png: b64(PNG) },
            { is_main_result: true, text: "   a\n0  1", html: "<table>", json: { a: [1] }, "application/x-new": 1 }],
  stdout: "loaded 1096 rows\n", stderr: "", stdout_truncated: false, stderr_truncated: true, error: null,
  timed_out: false, kernel_restarted: false, restart_reason: null, results_truncated: false, duration_ms: 41,
};
const END = { type: "end", context: "default", language: "python", execution_count: 4, timed_out: false,
              kernel_restarted: false, restart_reason: null, results_truncated: false, duration_ms: 12 };
const CTX = { id: "analysis", language: "python", cwd: "/work", user: "user", state: "idle", pid: 7 };

// The fake: routes["METHOD /path"](req, res, body) answers; requests holds [method, path, body].
let server, url, routes, requests;
before(async () => {
  server = createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const text = Buffer.concat(chunks).toString();
    const body = text && req.headers["content-type"] === "application/json" ? JSON.parse(text) : text;
    const path = req.url.split("?")[0];
    requests.push([req.method, path, body]);
    const route = routes[`${req.method} ${path}`];
    if (route) return route(req, res, body);
    send(res, 404, { error: { code: "not_found", message: `no route ${path}` } });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  url = `http://127.0.0.1:${server.address().port}`;
});
after(() => new Promise((resolve) => server.close(resolve)));
beforeEach(() => {
  requests = [];
  routes = { [`GET ${SBX}`]: (req, res) => send(res, 200, { id: "sbx_1", state: "running", session_id: "ses_1" }) };
});

function send(res, status, obj) {
  const data = obj === undefined ? "" : JSON.stringify(obj);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(data) });
  res.end(data);
}

/** A chunked NDJSON answer, one write per line; an awaited function runs in between. */
async function sendLines(res, lines) {
  res.writeHead(200, { "Content-Type": "application/x-ndjson" });
  for (const line of lines) {
    if (typeof line === "function") await line();
    else res.write(JSON.stringify(line) + "\n");
  }
  res.end();
}

const error = (status, code, message) => (req, res) => send(res, status, { error: { code, message } });
const sandbox = () => Sandbox.connect("sbx_1", { apiUrl: url, apiKey: "cpuos_test" });
const bodies = (method, path) => requests.filter(([m, p]) => m === method && p === path).map(([, , b]) => b);

describe("runCode", () => {
  test("a whole answer: results decoded, logs, fields", async () => {
    routes[`POST ${CODE}`] = (req, res) => send(res, 200, EXECUTION);
    const ex = await (await sandbox()).runCode("df.describe()");
    assert.ok(ex instanceof Execution);
    assert.deepEqual(bodies("POST", CODE), [{ code: "df.describe()" }]);
    const [fig, main] = ex.results;
    assert.ok(fig instanceof Result);
    assert.deepEqual(fig.png, PNG);
    assert.equal(Object.getPrototypeOf(fig.png), Uint8Array.prototype); // not a Buffer
    assert.deepEqual(fig.formats(), ["text", "png"]);
    assert.deepEqual([main.html, main.json, main.isMainResult, main.extra], ["<table>", { a: [1] }, true,
                                                                             { "application/x-new": 1 }]);
    assert.deepEqual(main.formats(), ["text", "html", "json", "application/x-new"]);
    assert.equal(ex.text, "   a\n0  1");
    assert.deepEqual(ex.logs, { stdout: ["loaded 1096 rows\n"], stderr: [] });
    assert.deepEqual([ex.error, ex.context, ex.language, ex.executionCount, ex.durationMs],
                     [null, "default", "python", 3, 41]);
    assert.deepEqual([ex.stdoutTruncated, ex.stderrTruncated, ex.timedOut], [false, true, false]);
  });

  test("the request body: language, context, timeout, figure formats", async () => {
    routes[`POST ${CODE}`] = (req, res) => send(res, 200, { ...EXECUTION, results: [] });
    const sbx = await sandbox();
    const ex = await sbx.runCode("echo hi", { language: "bash", context: "sh1", timeout: 90 });
    assert.equal(ex.text, undefined); // no main result
    await sbx.runCode("x", { context: CTX, figureFormats: ["png", "svg"] });
    assert.deepEqual(bodies("POST", CODE), [
      { code: "echo hi", language: "bash", context: "sh1", timeout: 90 },
      { code: "x", context: "analysis", figure_formats: ["png", "svg"] }]);
    await assert.rejects(sbx.runCode(42), TypeError);
    await assert.rejects(sbx.runCode("x", { figureFormats: "svg" }), /figureFormats/);
    await assert.rejects(sbx.runCode("x", { context: 3 }), /a context is an id/);
    assert.equal(bodies("POST", CODE).length, 2); // refused before a request
  });

  test("callbacks come in the order of the lines, as they arrive", async () => {
    let firstSeen;
    const seen = new Promise((resolve) => (firstSeen = resolve));
    let waited;
    routes[`POST ${CODE}`] = (req, res) => sendLines(res, [
      { type: "stdout", data: "one\n" },
      // The rest only after the client has called back for the first line (or 5 s, a timer
      // that does not hold the run up once the race is won).
      () => Promise.race([seen.then(() => (waited = true)), new Promise((r) => setTimeout(r, 5000).unref())]),
      { type: "result", is_main_result: false, text: "<Figure>", png: b64(PNG) },
      { type: "stderr", data: "warn\n" },
      { type: "stdout", data: "two\n" },
      { type: "progress", data: "a later line type" },
      { type: "error", name: "ValueError", value: "bad", traceback: "Traceback ...\nValueError: bad" },
      END,
    ]);
    const order = [];
    const ex = await (await sandbox()).runCode("x", {
      onStdout: (d) => { order.push(["stdout", d]); firstSeen(); },
      onStderr: (d) => order.push(["stderr", d]),
      onResult: (r) => order.push(["result", r.png]),
      onError: (e) => order.push(["error", e.name, e.value]),
    });
    assert.equal(waited, true);
    assert.deepEqual(order, [["stdout", "one\n"], ["result", PNG], ["stderr", "warn\n"], ["stdout", "two\n"],
                             ["error", "ValueError", "bad"]]);
    assert.deepEqual(ex.logs, { stdout: ["one\n", "two\n"], stderr: ["warn\n"] });
    assert.deepEqual(ex.error, { name: "ValueError", value: "bad", traceback: "Traceback ...\nValueError: bad" });
    assert.deepEqual([ex.results.length, ex.executionCount, ex.durationMs], [1, 4, 12]);
    assert.deepEqual(bodies("POST", CODE), [{ code: "x", stream: true }]);
  });

  test("a stream cut before its end line is an error", async () => {
    routes[`POST ${CODE}`] = (req, res) => sendLines(res, [{ type: "stdout", data: "half" }]);
    const got = [];
    await assert.rejects((await sandbox()).runCode("x", { onStdout: (d) => got.push(d) }),
                         (e) => e instanceof CpuosError && /without its end line/.test(e.message));
    assert.deepEqual(got, ["half"]);
  });

  test("results that are not what the API says are errors", async () => {
    const answers = [[[{ png: "not base64!" }], /png is not valid base64/], [[{ png: "iVBORw0KGgo" }], /not valid base64/],
                     [[{ jpeg: 12 }], /jpeg is a number/], [[{ html: ["<b>"] }], /html is a object/],
                     [{ text: "1" }, /not a list/], [["1"], /not a list/]];
    const sbx = await sandbox();
    for (const [results, message] of answers) {
      routes[`POST ${CODE}`] = (req, res) => send(res, 200, { ...EXECUTION, results });
      await assert.rejects(sbx.runCode("x"), (e) => e instanceof CpuosError && message.test(e.message));
    }
    routes[`POST ${CODE}`] = (req, res) => send(res, 200, { ...EXECUTION, results: [{ pdf: "JVBE\nRi0x\n" }] });
    assert.equal(Buffer.from((await sbx.runCode("x")).results[0].pdf).toString(), "%PDF-1"); // line breaks are fine
  });

  test("error statuses map to the SDK's errors, streamed or not", async () => {
    const sbx = await sandbox();
    for (const [status, code, Cls] of [[409, "conflict", ConflictError], [422, "invalid_argument", BadRequestError],
                                       [404, "not_found", NotFoundError], [429, "quota_exceeded", QuotaError],
                                       [503, "unavailable", SandboxError]]) {
      routes[`POST ${CODE}`] = error(status, code, "no");
      await assert.rejects(sbx.runCode("x"), Cls);
      await assert.rejects(sbx.runCode("x", { onStdout: () => {} }),
                           (e) => e instanceof Cls && e.status === status && e.code === code);
    }
  });

  test("a timeout and a restarted kernel are in the execution, not thrown", async () => {
    routes[`POST ${CODE}`] = (req, res) => send(res, 200, {
      ...EXECUTION, results: [], timed_out: true, kernel_restarted: true,
      restart_reason: "the python kernel exited (signal 9)", error: { name: "KeyboardInterrupt", value: "" } });
    const ex = await (await sandbox()).runCode("while True: pass", { timeout: "1s" });
    assert.deepEqual([ex.timedOut, ex.kernelRestarted, ex.restartReason, ex.error],
                     [true, true, "the python kernel exited (signal 9)",
                      { name: "KeyboardInterrupt", value: "", traceback: "" }]);
    assert.equal(bodies("POST", CODE)[0].timeout, "1s");
  });

  test("an abort ends a streamed call with the signal's reason", async () => {
    routes[`POST ${CODE}`] = (req, res) => sendLines(res, [{ type: "stdout", data: "x" },
                                                          () => new Promise((r) => setTimeout(r, 3000).unref()), END]);
    const ac = new AbortController();
    const t0 = Date.now();
    await assert.rejects((await sandbox()).runCode("x", { signal: ac.signal, onStdout: () => ac.abort(new Error("stop")) }),
                         /stop/);
    assert.ok(Date.now() - t0 < 2500, `settled after ${Date.now() - t0} ms`);
  });
});

describe("code contexts", () => {
  test("create, list, restart, remove", async () => {
    const made = { ...CTX, id: "ctx_0a1b2c3d" };
    routes[`POST ${CONTEXTS}`] = (req, res, b) => send(res, 201, { ...made, ...b });
    routes[`GET ${CONTEXTS}`] = (req, res) => send(res, 200, { contexts: [CTX, made] });
    routes[`POST ${CONTEXTS}/analysis/restart`] = (req, res) => send(res, 200, { ...CTX, pid: 9 });
    routes[`DELETE ${CONTEXTS}/ctx_0a1b2c3d`] = (req, res) => send(res, 204);
    routes[`DELETE ${CONTEXTS}/a%2Fb`] = error(404, "not_found", "no context 'a/b'");
    const sbx = await sandbox();
    const ctx = await sbx.createCodeContext();
    assert.deepEqual(ctx, made);
    await sbx.createCodeContext({ language: "bash", cwd: "/tmp", id: "sh", user: "root" });
    assert.deepEqual(bodies("POST", CONTEXTS), [{}, { language: "bash", cwd: "/tmp", id: "sh", user: "root" }]);
    assert.deepEqual((await sbx.listCodeContexts()).map((c) => c.id), ["analysis", "ctx_0a1b2c3d"]);
    assert.equal((await sbx.restartCodeContext("analysis")).pid, 9);
    await sbx.removeCodeContext(ctx);
    assert.deepEqual(requests.at(-1).slice(0, 2), ["DELETE", `${CONTEXTS}/ctx_0a1b2c3d`]);
    await assert.rejects(sbx.removeCodeContext("a/b"), NotFoundError); // one path segment, whatever it holds
    assert.equal(requests.at(-1)[1], `${CONTEXTS}/a%2Fb`);
    await assert.rejects(sbx.restartCodeContext(""), TypeError);
    routes[`POST ${CONTEXTS}`] = error(409, "conflict", "'sh' is taken");
    await assert.rejects(sbx.createCodeContext({ id: "sh" }), ConflictError);
    routes[`GET ${CONTEXTS}`] = (req, res) => send(res, 200, { contexts: [{ pid: 1 }] });
    await assert.rejects(sbx.listCodeContexts(), /without an id/);
  });
});
