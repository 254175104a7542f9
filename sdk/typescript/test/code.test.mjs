// sbx.runCode and code contexts against a real cpuosd and a python-template
// microVM. The daemon comes from the environment (CPUOS_API_URL,
// CPUOS_API_KEY): tests/e2e/test_typescript.py starts it and runs this file.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { BadRequestError, ConflictError, Execution, Sandbox } from "../dist/index.js";

for (const v of ["CPUOS_API_URL", "CPUOS_API_KEY"])
  if (!process.env[v]) throw new Error(`${v} is not set: run this through tests/e2e/test_typescript.py`);

/** [width, height] of a PNG, after checking its signature and that IHDR comes first. */
function pngSize(bytes) {
  assert.ok(bytes instanceof Uint8Array, "not bytes");
  assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a], "not a PNG");
  assert.equal(Buffer.from(bytes.subarray(12, 16)).toString(), "IHDR");
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  return [view.getUint32(16), view.getUint32(20)];
}

describe("runCode in a python sandbox", () => {
  let sbx;
  before(async () => {
    sbx = await Sandbox.create({ template: "python", timeout: "15m" });
  });
  after(async () => {
    await sbx?.kill().catch(() => {});
  });

  test("state persists between calls, and the last line is the main result", async () => {
    const first = await sbx.runCode("ts_x = 41\nprint('set')");
    assert.ok(first instanceof Execution);
    assert.deepEqual([first.logs.stdout, first.error, first.text], [["set\n"], null, undefined]);
    const second = await sbx.runCode("ts_x + 1");
    assert.equal(second.text, "42");
    assert.deepEqual([second.context, second.language, second.executionCount],
                     ["default", "python", first.executionCount + 1]);
  });

  test("a figure comes back as PNG bytes, a DataFrame as HTML", async () => {
    const fig = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2]);");
    assert.equal(fig.error, null, JSON.stringify(fig.error));
    assert.equal(fig.results.length, 1);
    const [width, height] = pngSize(fig.results[0].png);
    assert.ok(width > 100 && height > 100, `${width}x${height}`);
    assert.match(fig.results[0].text, /^<Figure/);
    const df = await sbx.runCode("import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima']})");
    assert.match(df.results.find((r) => r.isMainResult).html, /<table[\s\S]*Lima/);
    assert.match(df.text, /Oslo/);
  });

  test("an error is in the execution, and the context lives on", async () => {
    const ex = await sbx.runCode("ts_y = 5\n1 / 0");
    assert.deepEqual([ex.error?.name, ex.error?.value], ["ZeroDivisionError", "division by zero"]);
    assert.match(ex.error.traceback, /1 \/ 0/);
    assert.equal((await sbx.runCode("ts_y * 2")).text, "10");
  });

  test("callbacks are called while the code runs", async () => {
    const seen = [];
    const t0 = Date.now();
    const ex = await sbx.runCode("import time\nprint('first', flush=True)\ntime.sleep(4)\nraise KeyError('k')", {
      onStdout: (d) => seen.push(["stdout", d, Date.now() - t0]),
      onError: (e) => seen.push(["error", e.name, Date.now() - t0]),
    });
    const took = Date.now() - t0;
    assert.deepEqual(seen.map(([kind, value]) => [kind, value]), [["stdout", "first\n"], ["error", "KeyError"]]);
    assert.ok(seen[0][2] < took - 2000, `the first line came at ${seen[0][2]} ms of ${took}`);
    assert.deepEqual(ex.logs.stdout, ["first\n"]);
  });

  test("contexts: create, list, restart, remove; a busy one is a ConflictError", async () => {
    const ctx = await sbx.createCodeContext({ cwd: "/tmp" });
    assert.match(ctx.id, /^ctx_/);
    try {
      assert.equal((await sbx.runCode("import os\nctx_w = 1\nos.getcwd()", { context: ctx })).text, "'/tmp'");
      assert.equal((await sbx.runCode("'ctx_w' in globals()")).text, "False"); // not in "default"
      const listed = await sbx.listCodeContexts();
      assert.equal(listed.find((c) => c.id === ctx.id)?.state, "idle");
      await sbx.restartCodeContext(ctx);
      assert.equal((await sbx.runCode("'ctx_w' in globals()", { context: ctx })).text, "False");
      await assert.rejects(sbx.runCode("echo", { language: "bash", context: ctx }), BadRequestError);
      const slow = sbx.runCode("import time\ntime.sleep(8)\n'slept'", { context: ctx });
      for (let i = 0; i < 300; i++) {
        if ((await sbx.listCodeContexts()).find((c) => c.id === ctx.id)?.state === "busy") break;
        await new Promise((r) => setTimeout(r, 200));
      }
      await assert.rejects(sbx.runCode("1", { context: ctx }), ConflictError);
      assert.equal((await slow).text, "'slept'");
    } finally {
      await sbx.removeCodeContext(ctx);
    }
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
  });
});
