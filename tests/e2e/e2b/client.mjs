// E2B's own JavaScript SDKs against cpuos-e2b, as a user writes them: run with node from a
// directory holding one pinned version of npm `e2b` and `@e2b/code-interpreter` in node_modules
// (tests/e2e/test_e2b.py installs js-newest/ and js-older/ under build/e2b-node and copies this
// file there), with E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set. Both SDK versions read
// those three from the environment themselves (ConnectionConfig: apiUrl, sandboxUrl, apiKey), so
// no option is passed. The checks mirror client.py's; a line of JSON per check says whether it
// passed: {"call": "commands.run", "ok": true, "ms": 12} or {"call": ..., "ok": false, "error",
// "trace"}. Exits 0 when all passed.
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'

import { Sandbox, CommandExitError, FileNotFoundError } from 'e2b'

const RESULTS = []
const RUN = process.env.E2B_RUN || String(process.pid)
const CHECK_TIMEOUT_MS = 180_000 // a call that hangs is a failed row, not a hung client

function emit(row) {
  RESULTS.push(row)
  process.stdout.write(JSON.stringify(row) + '\n')
}

// Runs fn as the check `name`; returns its value, or undefined when it failed.
async function check(name, fn) {
  const t0 = performance.now()
  let timer
  try {
    const out = await Promise.race([
      fn(),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${CHECK_TIMEOUT_MS} ms`)),
          CHECK_TIMEOUT_MS)
      }),
    ])
    emit({ call: name, ok: true, ms: Math.round(performance.now() - t0) })
    return out
  } catch (e) {
    const cause = e?.cause ? ` (cause: ${e.cause?.message ?? e.cause})` : ''
    const error = `${e?.name ?? typeof e}: ${e?.message ?? e}${cause}`.slice(0, 600)
    emit({ call: name, ok: false, error, trace: String(e?.stack ?? e).slice(-1500) })
    return undefined
  } finally {
    clearTimeout(timer)
  }
}

function need(cond, what) {
  if (!cond) throw new Error(typeof what === 'string' ? what : JSON.stringify(what))
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms))

async function until(pred, ms = 60_000) {
  const deadline = Date.now() + ms
  while (!pred() && Date.now() < deadline) await sleep(100)
  return pred()
}

async function create() {
  const sbx = await Sandbox.create({ timeoutMs: 600_000, metadata: { suite: 'e2b', run: RUN } })
  need(sbx.sandboxId.length === 16, sbx.sandboxId)
  return sbx
}

async function runEcho(sbx) {
  const r = await sbx.commands.run('echo hi; echo err >&2')
  need(r.exitCode === 0 && r.stdout === 'hi\n' && r.stderr === 'err\n', r)
}

async function runFail(sbx) {
  try {
    await sbx.commands.run('exit 3')
  } catch (e) {
    need(e instanceof CommandExitError, `${e?.name}: ${e?.message}`)
    need(e.exitCode === 3, `exitCode ${e.exitCode}`)
    return
  }
  throw new Error('no CommandExitError')
}

async function runBackground(sbx) {
  const h = await sbx.commands.run('sleep 1; echo done', { background: true })
  need(h.pid > 0, `pid ${h.pid}`)
  const listed = (await sbx.commands.list()).map((p) => p.pid)
  need(listed.includes(h.pid), `${h.pid} not in ${JSON.stringify(listed)}`)
  const r = await h.wait()
  need(r.stdout === 'done\n', r)
}

async function runStdin(sbx) {
  const seen = []
  const h = await sbx.commands.run('read x; echo got $x; sleep 600', {
    background: true, stdin: true, onStdout: (d) => seen.push(d),
  })
  await sbx.commands.sendStdin(h.pid, 'abc\n')
  await until(() => seen.join('').includes('got abc'))
  need(seen.join('').includes('got abc'), seen)
  need(await sbx.commands.kill(h.pid), 'kill returned false')
}

async function filesRw(sbx) {
  const info = await sbx.files.write('/tmp/e2b/a.txt', 'hello')
  need(info.path === '/tmp/e2b/a.txt', info)
  need(await sbx.files.read('/tmp/e2b/a.txt') === 'hello', 'read back')
  const blob = new Uint8Array(256 * 64).map((_, i) => i % 256)
  await sbx.files.write('/tmp/e2b/b.bin', blob.buffer)
  const back = await sbx.files.read('/tmp/e2b/b.bin', { format: 'bytes' })
  need(Buffer.from(back).equals(Buffer.from(blob)), `bytes back: ${back.length} bytes`)
  await sbx.files.write([
    { path: '/tmp/e2b/c1', data: '1' },
    { path: '/tmp/e2b/c2', data: new TextEncoder().encode('2').buffer },
  ])
  need(await sbx.files.read('/tmp/e2b/c2') === '2', 'write of many files')
}

async function filesMeta(sbx) {
  const names = (await sbx.files.list('/tmp/e2b')).map((e) => e.name).sort()
  need(JSON.stringify(names) === JSON.stringify(['a.txt', 'b.bin', 'c1', 'c2']), names)
  need(await sbx.files.exists('/tmp/e2b/a.txt') && !(await sbx.files.exists('/tmp/e2b/none')),
    'exists')
  const i = await sbx.files.getInfo('/tmp/e2b/a.txt')
  need(i.size === 5 && i.type === 'file', i)
  need(await sbx.files.makeDir('/tmp/e2b/d') === true, 'makeDir')
  need(await sbx.files.makeDir('/tmp/e2b/d') === false, 'makeDir again')
  await sbx.files.rename('/tmp/e2b/c1', '/tmp/e2b/d/c1')
  need(await sbx.files.read('/tmp/e2b/d/c1') === '1', 'renamed')
  await sbx.files.remove('/tmp/e2b/d')
  need(!(await sbx.files.exists('/tmp/e2b/d')), 'removed')
  try {
    await sbx.files.read('/tmp/e2b/none')
  } catch (e) {
    need(e instanceof FileNotFoundError, `${e?.name}: ${e?.message}`)
    return
  }
  throw new Error('no FileNotFoundError')
}

async function filesWatch(sbx) {
  const events = []
  const h = await sbx.files.watchDir('/tmp/e2b', (e) => { events.push(e) }, { recursive: true })
  try {
    await sbx.files.write('/tmp/e2b/w.txt', 'x')
    await until(() => events.some((e) => e.name === 'w.txt'))
  } finally {
    await h.stop()
  }
  need(events.some((e) => e.name === 'w.txt' && ['create', 'write'].includes(e.type)), events)
}

async function pty(sbx) {
  const out = []
  const h = await sbx.pty.create({ rows: 24, cols: 80, onData: (d) => { out.push(Buffer.from(d)) } })
  await sbx.pty.resize(h.pid, { rows: 30, cols: 100 })
  await sbx.pty.sendInput(h.pid, new TextEncoder().encode('stty size; exit\n'))
  try {
    await h.wait()
  } catch (e) {
    if (!(e instanceof CommandExitError)) throw e
  }
  const text = Buffer.concat(out).toString()
  need(text.includes('30 100'), text)
}

async function timeout(sbx) {
  await sbx.setTimeout(900_000)
  const info = await sbx.getInfo()
  need(info.sandboxId === sbx.sandboxId && info.state === 'running', info)
}

async function metrics(sbx) {
  need(Array.isArray(await sbx.getMetrics()), 'metrics')
}

async function listing(sbx) {
  const p = Sandbox.list({ query: { metadata: { run: RUN } } })
  const ids = (await p.nextItems()).map((s) => s.sandboxId)
  need(ids.includes(sbx.sandboxId), ids)
}

async function pauseConnect(sbx) {
  await sbx.files.write('/tmp/e2b/kept', 'still here')
  await sbx.pause()
  const info = await Sandbox.getInfo(sbx.sandboxId)
  need(info.state === 'paused', `state ${info.state}`)
  const again = await Sandbox.connect(sbx.sandboxId)
  need(await again.files.read('/tmp/e2b/kept') === 'still here', 'after connect')
  need(await again.isRunning(), 'isRunning')
  return again
}

async function kill(sbx) {
  need(await sbx.kill() === true, 'kill')
  need(await Sandbox.kill(sbx.sandboxId) === false, 'kill again')
}

async function codePandas(csbx) {
  const ex = await csbx.runCode("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ndf.describe()")
  need(!ex.error && (ex.text || '').includes('mean'), ex.toJSON ? ex.toJSON() : ex)
}

async function codeChart(csbx) {
  const ex = await csbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()')
  need(!ex.error && ex.results.some((r) => r.png), ex.toJSON ? ex.toJSON() : ex)
  const png = Buffer.from(ex.results.find((r) => r.png).png, 'base64')
  need(png.subarray(0, 8).equals(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])),
    'not a PNG')
}

async function codeContexts(csbx) {
  const ctx = await csbx.createCodeContext({ language: 'python' })
  await csbx.runCode('x = 41', { context: ctx })
  const ex = await csbx.runCode('x + 1', { context: ctx })
  need(ex.text === '42', ex.toJSON ? ex.toJSON() : ex)
  need((await csbx.listCodeContexts()).some((c) => c.id === ctx.id), 'listed')
  await csbx.removeCodeContext(ctx)
}

function version(pkg) {
  try {
    const require = createRequire(import.meta.url)
    const dir = require.resolve(pkg).replace(/\/dist\/.*$/, '')
    return JSON.parse(readFileSync(`${dir}/package.json`, 'utf8')).version
  } catch {
    return '?'
  }
}

async function main() {
  process.on('unhandledRejection', (e) => {
    process.stderr.write(`unhandled rejection: ${e?.stack ?? e}\n`)
  })
  const which = process.argv.slice(2).length ? process.argv.slice(2) : ['sdk', 'interpreter']
  if (which.includes('sdk')) {
    const sbx = await check('Sandbox.create', create)
    if (sbx) {
      for (const [name, fn] of [
        ['commands.run', runEcho],
        ['commands.run exit code', runFail],
        ['commands.run background + wait', runBackground],
        ['commands.sendStdin + kill', runStdin],
        ['files.write/read', filesRw],
        ['files.list/exists/getInfo/makeDir/rename/remove', filesMeta],
        ['files.watchDir', filesWatch],
        ['pty.create + sendInput + resize', pty],
        ['setTimeout + getInfo', timeout],
        ['getMetrics', metrics],
        ['Sandbox.list', listing],
      ]) await check(name, () => fn(sbx))
      const again = await check('pause + connect', () => pauseConnect(sbx))
      await check('kill', () => kill(again || sbx))
    }
  }
  if (which.includes('interpreter')) {
    const { Sandbox: CodeSandbox } = await import('@e2b/code-interpreter')
    const csbx = await check('code_interpreter.Sandbox.create',
      () => CodeSandbox.create({ timeoutMs: 600_000, metadata: { suite: 'e2b', run: RUN } }))
    if (csbx) {
      await check('code_interpreter.runCode pandas', () => codePandas(csbx))
      await check('code_interpreter.runCode chart', () => codeChart(csbx))
      await check('code_interpreter contexts', () => codeContexts(csbx))
      await csbx.kill().catch(() => {})
    }
  }
  process.stdout.write(JSON.stringify({
    versions: { e2b: version('e2b'), '@e2b/code-interpreter': version('@e2b/code-interpreter') },
  }) + '\n')
  // streams the SDK left open (a hung watch, a PTY) must not keep node alive
  process.exit(RESULTS.length && RESULTS.every((r) => r.ok) ? 0 : 1)
}

main().catch((e) => {
  process.stderr.write(`${e?.stack ?? e}\n`)
  process.exit(2)
})
