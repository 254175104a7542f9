// Seed 004's agent.mjs ("run Vercel AI SDK agent code in a local sandbox"),
// on cpuos: @cpuos/ai-sdk-sandbox for @kosa8/ai-sdk-sandbox, the node
// template for the node:22-alpine image. `model` is any AI SDK model: here
// an OpenAI-compatible one from OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL.
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, stepCountIs, tool } from 'ai';
import { z } from 'zod';
import { createCpuosNetworkSandboxSession } from '@cpuos/ai-sdk-sandbox';

const provider = createOpenAICompatible({
  name: 'openai-compatible',
  baseURL: process.env.OPENAI_BASE_URL ?? 'https://gpuos.si/v1',
  apiKey: process.env.OPENAI_API_KEY,
});
const model = provider(process.env.OPENAI_MODEL ?? 'qwen3-32b');

const session = await createCpuosNetworkSandboxSession({
  template: 'node',
  networkPolicy: { mode: 'custom', allowedHosts: ['registry.npmjs.org'] },
});
try {
  const sandbox = session.restricted();
  const result = await generateText({
    model,                        // any AI SDK model
    stopWhen: stepCountIs(10),
    prompt: `Run the tests.\n\nSandbox:\n${sandbox.description}`,
    experimental_sandbox: sandbox,
    tools: {
      shell: tool({
        description: 'Run a shell command in the sandbox.',
        inputSchema: z.object({ command: z.string() }),
        execute: ({ command }, { experimental_sandbox, abortSignal }) =>
          experimental_sandbox.run({ command, abortSignal }),
      }),
    },
  });
  console.log(result.text);
} finally {
  await session.destroy();        // deletes the microVM
}
