/**
 * A fake Anthropic upstream for the console test (started by scripts/console-tests.sh before the gateway):
 * answers every POST /v1/messages with one message whose usage is in Anthropic's own buckets, the cache
 * writes split by lifetime, so the console has a record with every kind of token to show. Writes the port
 * it listens on to the file named by its first argument.
 */
import { writeFileSync } from 'node:fs';
import { createServer } from 'node:http';

/** The usage every answer reports (the console test checks the record against it). */
export const USAGE = {
  input_tokens: 1200,
  cache_read_input_tokens: 30000,
  cache_creation_input_tokens: 5000,
  cache_creation: { ephemeral_5m_input_tokens: 2000, ephemeral_1h_input_tokens: 3000 },
  output_tokens: 400,
};

if (process.argv[2]) {
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk) => {
      body += chunk;
    });
    req.on('end', () => {
      if (req.method !== 'POST' || !req.url.startsWith('/v1/messages')) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ type: 'error', error: { type: 'not_found_error', message: 'no such path' } }));
        return;
      }
      const model = (() => {
        try {
          return JSON.parse(body).model;
        } catch {
          return 'unknown';
        }
      })();
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          id: 'msg_console',
          type: 'message',
          role: 'assistant',
          model,
          content: [{ type: 'text', text: 'Cached hello.' }],
          stop_reason: 'end_turn',
          stop_sequence: null,
          usage: USAGE,
        }),
      );
    });
  });
  server.listen(0, '127.0.0.1', () => writeFileSync(process.argv[2], String(server.address().port)));
}
