// One call of Google's @google/genai Node SDK against tollgate, for tests/sdk/test_gemini_node_sdk.py: the
// job (a JSON object) is the first argument; what the SDK read (or the error it raised) is printed as JSON.
//
// Job: {base_url, key, op, model, ...}. Ops: `text`, `stream` (text, finish reason, usage, request id),
// `tools` (function calls), `round_trip` (the history of `contents` sent back, with a function response),
// `structured` (a JSON schema, the text parsed), `count` (total tokens), `models` (names), `embed` (the
// vectors of `contents`).

import { GoogleGenAI } from '@google/genai';
import { errorOf, report } from './report.mjs';

const job = JSON.parse(process.argv[2]);
const ai = new GoogleGenAI({ apiKey: job.key, httpOptions: { baseUrl: job.base_url, timeout: 30000 } });

const WEATHER = {
  name: 'get_weather',
  description: 'Get the current weather for a city.',
  parametersJsonSchema: {
    type: 'object',
    properties: { city: { type: 'string', description: 'City name, e.g. Paris' } },
    required: ['city'],
  },
};

function requestId(response) {
  const headers = response?.sdkHttpResponse?.headers ?? {};
  return headers['x-request-id'] ?? null;
}

function summary(r) {
  return {
    text: r.text ?? '',
    calls: (r.functionCalls ?? []).map((c) => ({ id: c.id ?? null, name: c.name, args: c.args })),
    finish: r.candidates?.[0]?.finishReason ?? null,
    usage: r.usageMetadata ?? null,
    request_id: requestId(r),
    content: r.candidates?.[0]?.content ?? null,
  };
}

async function run() {
  const config = { maxOutputTokens: 256, ...(job.config ?? {}) };
  switch (job.op) {
    case 'text':
      return summary(await ai.models.generateContent({ model: job.model, contents: job.contents, config }));
    case 'stream': {
      let text = '';
      let last = null;
      const calls = [];
      const stream = await ai.models.generateContentStream({ model: job.model, contents: job.contents, config });
      try {
        for await (const chunk of stream) {
          text += chunk.text ?? '';
          calls.push(...(chunk.functionCalls ?? []).map((c) => ({ name: c.name, args: c.args })));
          last = chunk;
        }
      } catch (e) {
        return { text, error: errorOf(e) };
      }
      return { ...summary(last), text, calls };
    }
    case 'tools':
    case 'round_trip':
      return summary(
        await ai.models.generateContent({
          model: job.model,
          contents: job.contents,
          config: { ...config, tools: [{ functionDeclarations: [WEATHER] }] },
        }),
      );
    case 'structured': {
      const r = await ai.models.generateContent({
        model: job.model,
        contents: job.contents,
        config: {
          ...config,
          responseMimeType: 'application/json',
          responseJsonSchema: {
            type: 'object',
            properties: { city: { type: 'string' }, country: { type: 'string' } },
            required: ['city', 'country'],
          },
        },
      });
      return { ...summary(r), parsed: JSON.parse(r.text) };
    }
    case 'count':
      return { total_tokens: (await ai.models.countTokens({ model: job.model, contents: job.contents })).totalTokens };
    case 'embed': {
      const r = await ai.models.embedContent({ model: job.model, contents: job.contents, config: job.config ?? {} });
      return { vectors: (r.embeddings ?? []).map((e) => e.values) };
    }
    case 'models': {
      const names = [];
      for await (const m of await ai.models.list()) {
        names.push(m.name);
      }
      return { names };
    }
    default:
      throw new Error(`unknown op ${job.op}`);
  }
}

await report(run);
