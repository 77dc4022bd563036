// The official `openai` npm client (v6; Node.js 20, and Debian's 18 checked by hand) against txscore's
// OpenAI-compatible endpoints over the admin port's HTTPS with a client certificate, as a
// platform team's code would call them: models, chat (whole, streamed, json_schema) and
// completions; an unknown model is the client's NotFoundError; a caller without a certificate
// is turned away at the TLS handshake. Run by tests/integration/demo_test.py against the demo
// configuration as shipped.
// Usage: node openai_client_test.js NODE_MODULES_DIR BASE_URL CA CERT KEY MODEL
const path = require('path');
const fs = require('fs');
const https = require('https');
const { Readable } = require('stream');
const assert = require('assert');

const [modules, baseURL, caFile, certFile, keyFile, model] = process.argv.slice(2);
const { OpenAI, NotFoundError, APIConnectionError } = require(path.join(modules, 'openai'));

// A fetch over Node's https module, so that the client presents a certificate (Node's own
// fetch takes no client certificate without the undici package).
function fetchWith(agent) {
  return (url, init = {}) =>
    new Promise((resolve, reject) => {
      const target = new URL(url);
      const headers = {};
      new Headers(init.headers || {}).forEach((value, name) => {
        headers[name] = value;
      });
      const request = https.request(
        { hostname: target.hostname, port: target.port, path: target.pathname + target.search,
          method: init.method || 'GET', headers, agent },
        (response) => {
          const answer = new Headers();
          for (const [name, value] of Object.entries(response.headers)) {
            answer.set(name, Array.isArray(value) ? value.join(', ') : value);
          }
          resolve(new Response(Readable.toWeb(response), { status: response.statusCode, headers: answer }));
        });
      request.on('error', reject);
      if (init.signal) init.signal.addEventListener('abort', () => request.destroy(new Error('aborted')));
      request.end(init.body === undefined || init.body === null ? undefined : init.body);
    });
}

function client(withCertificate) {
  const tls = { ca: fs.readFileSync(caFile) };
  if (withCertificate) {
    tls.cert = fs.readFileSync(certFile);
    tls.key = fs.readFileSync(keyFile);
  }
  return new OpenAI({ apiKey: 'not-used', baseURL, maxRetries: 0, timeout: 300000,
                      fetch: fetchWith(new https.Agent(tls)) });
}

async function main() {
  const openai = client(true);
  const messages = [{ role: 'system', content: 'You are a claims analyst.' },
                    { role: 'user', content: 'Claim 7: water damage reported 40 days late.' }];

  const models = await openai.models.list();
  const ids = models.data.map((m) => m.id);
  assert.ok(ids.includes(model), `models: ${ids}`);
  console.log(`ok   models.list: ${ids.join(', ')}`);

  const whole = await openai.chat.completions.create({ model, messages, temperature: 0, seed: 7, max_tokens: 24 });
  assert.strictEqual(whole.object, 'chat.completion');
  assert.strictEqual(whole.choices.length, 1);
  const text = whole.choices[0].message.content;
  assert.strictEqual(typeof text, 'string');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.prompt_tokens > 0 && whole.usage.completion_tokens > 0);
  assert.strictEqual(whole.usage.total_tokens, whole.usage.prompt_tokens + whole.usage.completion_tokens);
  console.log(`ok   chat.completions: ${whole.usage.completion_tokens} tokens, finish ${whole.choices[0].finish_reason}`);

  const stream = await openai.chat.completions.create({
    model, messages, temperature: 0, seed: 7, max_tokens: 24, stream: true, stream_options: { include_usage: true } });
  let joined = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.strictEqual(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      joined += choice.delta.content || '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.strictEqual(joined, text, 'the streamed pieces join up to the whole reply');
  assert.strictEqual(finish, whole.choices[0].finish_reason);
  assert.deepStrictEqual(usage, whole.usage);
  console.log(`ok   chat.completions stream: ${chunks} chunks, the same text and usage`);

  const schema = { type: 'object', properties: { risk: { type: 'string', enum: ['low', 'medium', 'high'] },
                                                 flags: { type: 'array', items: { type: 'string', enum: ['late_report', 'none'] } } },
                   required: ['risk', 'flags'] };
  const structured = await openai.chat.completions.create({
    model, messages, temperature: 0, max_tokens: 96,
    response_format: { type: 'json_schema', json_schema: { name: 'findings', schema, strict: true } } });
  const findings = JSON.parse(structured.choices[0].message.content);
  assert.ok(['low', 'medium', 'high'].includes(findings.risk), JSON.stringify(findings));
  assert.ok(Array.isArray(findings.flags) && findings.flags.every((f) => ['late_report', 'none'].includes(f)));
  console.log(`ok   response_format json_schema: ${JSON.stringify(findings).slice(0, 80)}`);

  const completion = await openai.completions.create({ model, prompt: 'Claim 12 was reported', max_tokens: 8,
                                                       temperature: 0 });
  assert.strictEqual(completion.object, 'text_completion');
  assert.strictEqual(typeof completion.choices[0].text, 'string');
  assert.ok(completion.usage.completion_tokens >= 1 && completion.usage.completion_tokens <= 8);
  console.log(`ok   completions: ${completion.usage.completion_tokens} tokens`);

  await assert.rejects(openai.chat.completions.create({ model: 'gpt-4o', messages }), (e) => {
    assert.ok(e instanceof NotFoundError, String(e));
    assert.strictEqual(e.status, 404);
    return true;
  });
  console.log('ok   an unknown model: NotFoundError');

  await assert.rejects(client(false).models.list(), (e) => e instanceof APIConnectionError);
  console.log('ok   no client certificate: refused at the TLS handshake');
}

main().then(() => console.log('openai client test: all passed'), (e) => {
  console.error(e);
  process.exit(1);
});
