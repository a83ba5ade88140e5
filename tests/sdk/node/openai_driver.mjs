// One call of OpenAI's `openai` Node SDK against tollgate, for tests/sdk/test_node_endpoints_sdk.py: the job
// (a JSON object) is the first argument; what the SDK read (or the error it raised) is printed as JSON.
//
// Job: {base_url, key, op, model, ...}. Ops: `embed` (`input`, the vectors as the SDK decoded them: it asks
// for base64 unless told otherwise), `complete` (`prompt`, `suffix`, `max_tokens`: the text and usage),
// `complete_stream` (the same streamed, with its usage).

import OpenAI from 'openai';
import { report } from './report.mjs';

const job = JSON.parse(process.argv[2]);
const client = new OpenAI({ apiKey: job.key, baseURL: job.base_url, maxRetries: 0, timeout: 30000 });

async function run() {
  switch (job.op) {
    case 'embed': {
      const r = await client.embeddings.create({ model: job.model, input: job.input, ...(job.extra ?? {}) });
      return { vectors: r.data.map((d) => Array.from(d.embedding)), usage: r.usage };
    }
    case 'complete': {
      const r = await client.completions.create({
        model: job.model, prompt: job.prompt, suffix: job.suffix, max_tokens: job.max_tokens,
      });
      return { text: r.choices[0].text, usage: r.usage };
    }
    case 'complete_stream': {
      const stream = await client.completions.create({
        model: job.model, prompt: job.prompt, stream: true, stream_options: { include_usage: true },
      });
      let text = '';
      let usage = null;
      for await (const chunk of stream) {
        text += chunk.choices.map((c) => c.text).join('');
        usage = chunk.usage ?? usage;
      }
      return { text, usage };
    }
    default:
      throw new Error(`unknown op ${job.op}`);
  }
}

await report(run);
