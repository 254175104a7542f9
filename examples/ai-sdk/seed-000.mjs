// Seed 000 ("Vercel AI SDK code execution tool with a sandbox"), as the page
// has it. Changed: the base URL may come from GPUOS_BASE_URL, and the answer
// is printed. Run: CPUOS_API_KEY=... GPUOS_API_KEY=... node seed-000.mjs
import { createOpenAICompatible } from "@ai-sdk/openai-compatible"
import { Sandbox } from "@cpuos/sdk"
import { generateText, stepCountIs, tool } from "ai"
import { z } from "zod"

const gpuos = createOpenAICompatible({
  name: "gpuos",
  baseURL: process.env.GPUOS_BASE_URL ?? "https://gpuos.si/v1",
  apiKey: process.env.GPUOS_API_KEY,
})

const sbx = await Sandbox.create({ template: "python", timeout: "30m" })

const runPython = tool({
  description: "Run a Python 3 script in an isolated sandbox. Files live in /work.",
  inputSchema: z.object({ code: z.string() }),
  execute: async ({ code }) => {
    await sbx.files.write("/work/main.py", code)
    const run = await sbx.exec("cd /work && python main.py", { timeout: "2m" })
    return {
      exitCode: run.exitCode,
      stdout: run.stdout.slice(-4000),
      stderr: run.stderr.slice(-2000),
    }
  },
})

const { text } = await generateText({
  model: gpuos(process.env.GPUOS_MODEL ?? "qwen3-32b"),
  tools: { runPython },
  stopWhen: stepCountIs(8),
  prompt: "Simulate 10,000 rolls of two dice and report the most common sum.",
})
console.log(text)

await sbx.pause()
