// Fastify 5 over HTTP/2 (node:http2, cleartext) with the idempotency plugin: a first response,
// its byte-for-byte replay, a 422, and a handler that throws after it answered, from a node:http2
// client. Express 5 does not serve HTTP/2 itself (docs/http.md, "Fastify").
import http2 from 'node:http2';
import type { AddressInfo } from 'node:net';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { idempotency } from '../../src/http/fastify.js';
import { type HttpTestContext, newKey, setupHttpTest, until } from './support.js';

interface H2Answer {
  readonly status: number;
  readonly headers: http2.IncomingHttpHeaders;
  readonly body: Buffer;
}

function post(session: http2.ClientHttp2Session, path: string, key: string, json: unknown): Promise<H2Answer> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/json',
      'idempotency-key': `"${key}"`,
    });
    const chunks: Buffer[] = [];
    let headers: http2.IncomingHttpHeaders = {};
    stream.on('response', (h) => {
      headers = h;
    });
    stream.on('data', (chunk: Buffer) => chunks.push(chunk));
    stream.on('end', () => resolve({ status: Number(headers[':status']), headers, body: Buffer.concat(chunks) }));
    stream.on('error', reject);
    stream.end(JSON.stringify(json));
  });
}

const makeApp = () => Fastify({ http2: true });

describe('fastify over HTTP/2', () => {
  let ctx: HttpTestContext;
  let app: ReturnType<typeof makeApp>;
  let session: http2.ClientHttp2Session;
  const afterResponse: unknown[] = [];
  let orders = 0;

  beforeAll(async () => {
    ctx = await setupHttpTest('http_http2');
    app = makeApp();
    await app.register(idempotency, {
      settle: ctx.settle,
      binding: () => ({ tenant: 'acme', principal: 'alice', generation: 1 }),
      onErrorAfterResponse: (error) => afterResponse.push(error),
    });
    app.post('/orders', async (req, reply) => {
      orders += 1;
      reply.code(201).header('location', `/orders/${orders}`);
      return { order: orders, body: req.body };
    });
    app.post('/throws-after', async (_req, reply) => {
      reply.code(201).send({ sent: true });
      throw new Error('audit failed after the response');
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    session = http2.connect(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    session?.close();
    await app?.close();
    await ctx?.close();
  });

  test('first response, byte-for-byte replay, 422 for another body, an error after the response never sent', async () => {
    const key = newKey();
    const first = await post(session, '/orders', key, { item: 'h2' });
    expect(first.status).toBe(201);
    expect(JSON.parse(first.body.toString())).toEqual({ order: 1, body: { item: 'h2' } });
    const replay = await post(session, '/orders', key, { item: 'h2' });
    expect(replay.status).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.headers.location).toBe('/orders/1');
    expect(replay.body.equals(first.body)).toBe(true);
    expect((await post(session, '/orders', key, { item: 'other' })).status).toBe(422);
    expect(orders).toBe(1);

    const thrown = newKey();
    const sent = await post(session, '/throws-after', thrown, {});
    expect(sent.status).toBe(201);
    expect(JSON.parse(sent.body.toString())).toEqual({ sent: true });
    await until(async () => afterResponse.length === 1);
    const again = await post(session, '/throws-after', thrown, {});
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body.equals(sent.body)).toBe(true);
  });
});
