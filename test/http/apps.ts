// The same small app for Express 5 and Fastify 5, behind pg-settle's idempotency middleware.
// No vitest imports: the crash test runs it in a child process too.
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { pipeline, Readable } from 'node:stream';
import express from 'express';
import Fastify from 'fastify';
import { sql } from 'slonik';
import { z } from 'zod';
import type { SettleClient } from '../../src/index.js';
import { createIdempotency } from '../../src/http/express.js';
import { idempotency } from '../../src/http/fastify.js';
import type { IdempotencyBinding, RouteOptions } from '../../src/http/core/options.js';
import { brokenBodyChunks, startWebApp, WEB_FRAMEWORKS, type WebFramework } from './web-apps.js';

export type Framework = 'express' | 'fastify' | WebFramework;
export const FRAMEWORKS: readonly Framework[] = ['express', 'fastify'];
/** Every adapter: Express, Fastify, and pg-settle/fetch on Hono and as a plain fetch handler. */
export const ALL_FRAMEWORKS: readonly Framework[] = [...FRAMEWORKS, ...WEB_FRAMEWORKS];

/** A handler invocation held by the test until it releases it. */
export interface Hold {
  readonly entered: Promise<number>;
  release(): void;
}

export interface AppHooks {
  /** Invocations per route name. */
  readonly calls: Record<string, number>;
  /** What the app's error handling saw: Express's error handler, Fastify's log (warn and up), Hono's onError, the fetch host. */
  readonly errors: string[];
  /** The next invocation of /orders (or /slow) blocks until released. */
  hold(): Hold;
  /** Called by /charge before its response: a downstream effect keyed by downstreamKey. */
  charge?: (downstreamKey: string) => Promise<void>;
}

export interface TestApp {
  readonly url: string;
  readonly hooks: AppHooks;
  close(): Promise<void>;
}

export interface AppConfig {
  readonly settle: SettleClient;
  readonly maxBodyBytes?: number;
  /** Overrides for /orders (lease tests). */
  readonly orders?: RouteOptions<unknown>;
  readonly waitForMs?: number;
  /** Block /charge forever after its downstream effect (crash test). */
  readonly chargeBlocks?: boolean;
  readonly charge?: (downstreamKey: string) => Promise<void>;
  /** handlerTimeoutMs of /slow (held like /orders). */
  readonly slowTimeoutMs?: number;
  /** Errors after a complete response (/throws-after, /rejects-after) are handed here. */
  readonly onErrorAfterResponse?: (error: unknown) => void;
}

const binding = (headers: Record<string, string | string[] | undefined>): IdempotencyBinding => ({
  tenant: String(headers['x-tenant'] ?? 'acme'),
  principal: String(headers['x-user'] ?? 'alice'),
  scopes: ['orders:write'],
  generation: 1,
});

/** The hooks as the app sees them: it takes the holds the test registered. */
type HeldHooks = AppHooks & { take(): { entered: (n: number) => void; released: Promise<void> } | undefined };

function makeHooks(charge?: (downstreamKey: string) => Promise<void>): HeldHooks {
  const holds: { entered: (n: number) => void; released: Promise<void> }[] = [];
  return {
    calls: {},
    errors: [],
    ...(charge === undefined ? {} : { charge }),
    hold() {
      let entered!: (n: number) => void;
      let release!: () => void;
      const enteredP = new Promise<number>((resolve) => {
        entered = resolve;
      });
      const released = new Promise<void>((resolve) => {
        release = resolve;
      });
      holds.push({ entered, released });
      return { entered: enteredP, release };
    },
    take: () => holds.shift(),
  };
}

const count = (hooks: AppHooks, route: string): number => (hooks.calls[route] = (hooks.calls[route] ?? 0) + 1);

const streamChunks = (chunks: number, size: number): Buffer[] =>
  Array.from({ length: chunks }, (_, i) => Buffer.alloc(size, String.fromCharCode(97 + (i % 26))));

/** The body of /broken as a stream that fails after its bytes (after `beforeBreak`). */
const brokenStream = (bytes: number, beforeBreak: () => Promise<void>): Readable =>
  Readable.from(
    (async function* () {
      yield* brokenBodyChunks(bytes);
      await beforeBreak();
      throw new Error('the body broke off');
    })(),
  );

/** Waits on the test's hold, if it registered one (a controlled point in a handler). */
async function held(hooks: HeldHooks, n: number): Promise<void> {
  const hold = hooks.take();
  if (hold === undefined) return;
  hold.entered(n);
  await hold.released;
}

const ledgerInsert = (account: string) => sql.type(z.object({ id: z.bigint() }))`
  insert into http_ledger (account, amount) values (${account}, 100) returning id`;
const ledgerCount = (account: string) => sql.type(z.object({ count: z.number() }))`
  select count(*)::int as count from http_ledger where account = ${account}`;

export async function startApp(framework: Framework, config: AppConfig): Promise<TestApp> {
  if (framework === 'hono' || framework === 'fetch') return startWebApp(framework, config);
  return framework === 'express' ? startExpress(config) : startFastify(config);
}

async function startExpress(config: AppConfig): Promise<TestApp> {
  const hooks = makeHooks(config.charge);
  const app = express();
  const idem = createIdempotency({
    settle: config.settle,
    binding: (req) => binding(req.headers),
    ...(config.maxBodyBytes === undefined ? {} : { maxBodyBytes: config.maxBodyBytes }),
    ...(config.waitForMs === undefined ? {} : { waitForMs: config.waitForMs }),
    ...(config.onErrorAfterResponse === undefined ? {} : { onErrorAfterResponse: config.onErrorAfterResponse }),
  });
  app.use(express.json());
  app.use(express.text());

  const orders = async (req: express.Request, res: express.Response): Promise<void> => {
    const n = count(hooks, 'orders');
    const hold = hooks.take();
    if (hold !== undefined) {
      hold.entered(n);
      await hold.released;
    }
    res.status(201).set({ Location: `/orders/${n}`, ETag: `"v${n}"`, 'X-Trace': `t-${n}` });
    res.cookie('session', `s${n}`);
    res.json({ order: n, attempt: req.idempotency?.attempt, body: req.body as unknown });
  };
  app.post('/orders', idem(config.orders as RouteOptions<express.Request>), orders);
  app.patch('/orders', idem(config.orders as RouteOptions<express.Request>), orders);
  app.post('/slow', idem({ handlerTimeoutMs: config.slowTimeoutMs ?? 60_000 }), async (_req, res) => {
    const n = count(hooks, 'slow');
    const hold = hooks.take();
    if (hold !== undefined) {
      hold.entered(n);
      await hold.released;
    }
    res.status(201).json({ slow: n });
  });
  app.get('/orders', idem(), (_req, res) => {
    res.json({ get: count(hooks, 'get') });
  });
  app.post('/optional', idem({ required: false }), (_req, res) => {
    res.status(201).json({ optional: count(hooks, 'optional') });
  });
  app.post('/strict', idem({ strict: true }), (_req, res) => {
    res.status(201).json({ strict: count(hooks, 'strict') });
  });
  app.post('/text', idem(), (req, res) => {
    res
      .status(201)
      .type('text/plain')
      .send(`text ${count(hooks, 'text')}: ${String(req.body)}`);
  });
  app.post('/status', idem({ rerunAfterUnknown: true }), (req, res) => {
    const n = count(hooks, 'status');
    const status = Number((req.body as { status: number }[])[n - 1]?.status ?? 201);
    res.status(status).json({ status, n, earlier: req.idempotency?.earlier });
  });
  app.post('/gateway', idem(), (_req, res) => {
    res.status(504).json({ gateway: count(hooks, 'gateway') });
  });
  app.post('/stream', idem(), (req, res) => {
    count(hooks, 'stream');
    const { chunks, size } = req.body as { chunks: number; size: number };
    res.status(200).set({ 'Content-Type': 'application/octet-stream', Location: '/streams/1' });
    Readable.from(streamChunks(chunks, size)).pipe(res);
  });
  app.post('/ledger', idem({ settlement: 'transaction' }), async (req, res) => {
    const n = count(hooks, 'ledger');
    const tx = req.idempotency?.transaction;
    if (tx == null) throw new Error('no transaction');
    const id = await tx.oneFirst(ledgerInsert(String((req.body as { account: string }).account)));
    if (req.headers['x-fail'] === '1') {
      res.status(500).json({ failed: n });
      return;
    }
    res.status(201).json({ entry: id.toString(), n });
  });
  app.post('/charge', idem({ leaseMs: 60_000 }), async (req, res) => {
    const n = count(hooks, 'charge');
    await hooks.charge?.(req.idempotency!.downstreamKey);
    if (config.chargeBlocks === true) await new Promise(() => {});
    res.status(201).json({ charged: n, attempt: req.idempotency?.attempt });
  });
  // Code after the response throws (an audit or metrics call): synchronously, or later.
  app.post('/throws-after', idem(), (_req, res) => {
    res.status(201).json({ thrown: count(hooks, 'throws-after') });
    throw new Error('audit failed after the response');
  });
  app.post('/rejects-after', idem(), async (_req, res) => {
    const n = count(hooks, 'rejects-after');
    res.status(201).json({ rejected: n });
    const hold = hooks.take();
    if (hold !== undefined) {
      hold.entered(n);
      await hold.released;
    }
    throw new Error('metrics failed after the response');
  });
  // A 201 of `bytes` bytes that breaks off midway with x-break: after writing them the handler
  // throws, rejects (after the test's hold), or its source stream fails (after the hold), which
  // stream.pipeline turns into res.destroy() and hands to the error handler.
  app.post('/broken', idem(), (req, res, next) => {
    const n = count(hooks, 'broken');
    const { bytes } = req.body as { bytes: number };
    res.status(201).set({ 'Content-Type': 'application/octet-stream', Location: `/broken/${n}` });
    const how = req.headers['x-break'];
    if (how === undefined) {
      res.end(Buffer.concat(brokenBodyChunks(bytes)));
      return undefined;
    }
    if (how === 'stream') {
      pipeline(
        brokenStream(bytes, () => held(hooks, n)),
        res,
        (error) => error && next(error),
      );
      return undefined;
    }
    res.write(Buffer.concat(brokenBodyChunks(bytes)));
    if (how === 'throw') throw new Error('the body broke off');
    return held(hooks, n).then(() => {
      throw new Error('the body broke off');
    });
  });
  // The same resource route, mounted on a route and, under /v2, by router.use() (the concrete
  // path and query string are fingerprinted either way).
  const payouts = (req: express.Request, res: express.Response): void => {
    res
      .status(201)
      .json({ payout: count(hooks, 'payouts'), account: req.params.id, currency: req.query.currency ?? null });
  };
  app.post('/accounts/:id/payouts', idem(), payouts);
  const v2 = express.Router();
  v2.use(idem());
  v2.post('/accounts/:id/payouts', payouts);
  app.use('/v2', v2);
  app.post('/narrow/accounts/:id/payouts', idem({ fingerprintTarget: 'route' }), payouts);
  // Transaction mode, a handler that also reads through the client's own pool.
  app.post('/ledger-pool', idem({ settlement: 'transaction' }), async (req, res) => {
    const tx = req.idempotency!.transaction!;
    const account = String((req.body as { account: string }).account);
    const id = await tx.oneFirst(ledgerInsert(account));
    const committed = await (await config.settle.getPool()).oneFirst(ledgerCount(account));
    res.status(201).json({ entry: id.toString(), committedBefore: committed });
  });
  // An error handler that answers JSON, as most apps have one.
  app.use(
    (error: Error & { status?: number }, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
      hooks.errors.push(error.message);
      res.status(error.status ?? 500).json({ error: error.message });
    },
  );
  const server: Server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    hooks,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

async function startFastify(config: AppConfig): Promise<TestApp> {
  const hooks = makeHooks(config.charge);
  const app = Fastify({
    logger: { level: 'warn', stream: { write: (line: string) => void hooks.errors.push(line) } },
  });
  await app.register(idempotency, {
    settle: config.settle,
    binding: (req) => binding(req.headers),
    ...(config.maxBodyBytes === undefined ? {} : { maxBodyBytes: config.maxBodyBytes }),
    ...(config.waitForMs === undefined ? {} : { waitForMs: config.waitForMs }),
    ...(config.onErrorAfterResponse === undefined ? {} : { onErrorAfterResponse: config.onErrorAfterResponse }),
  });
  const orders = async (req: import('fastify').FastifyRequest, reply: import('fastify').FastifyReply) => {
    const n = count(hooks, 'orders');
    const hold = hooks.take();
    if (hold !== undefined) {
      hold.entered(n);
      await hold.released;
    }
    reply.code(201).headers({
      location: `/orders/${n}`,
      etag: `"v${n}"`,
      'x-trace': `t-${n}`,
      'set-cookie': `session=s${n}; Path=/`,
    });
    return { order: n, attempt: req.idempotency?.attempt, body: req.body };
  };
  const ordersConfig = {
    config:
      config.orders === undefined
        ? {}
        : { idempotency: config.orders as RouteOptions<import('fastify').FastifyRequest> },
  };
  app.post('/orders', ordersConfig, orders);
  app.patch('/orders', ordersConfig, orders);
  app.post(
    '/slow',
    { config: { idempotency: { handlerTimeoutMs: config.slowTimeoutMs ?? 60_000 } } },
    async (_req, reply) => {
      const n = count(hooks, 'slow');
      const hold = hooks.take();
      if (hold !== undefined) {
        hold.entered(n);
        await hold.released;
      }
      reply.code(201);
      return { slow: n };
    },
  );
  app.get('/orders', async () => ({ get: count(hooks, 'get') }));
  app.post('/optional', { config: { idempotency: { required: false } } }, async (_req, reply) => {
    reply.code(201);
    return { optional: count(hooks, 'optional') };
  });
  app.post('/strict', { config: { idempotency: { strict: true } } }, async (_req, reply) => {
    reply.code(201);
    return { strict: count(hooks, 'strict') };
  });
  app.post('/text', async (req, reply) => {
    reply.code(201).type('text/plain');
    return `text ${count(hooks, 'text')}: ${String(req.body)}`;
  });
  app.post('/status', { config: { idempotency: { rerunAfterUnknown: true } } }, async (req, reply) => {
    const n = count(hooks, 'status');
    const status = Number((req.body as { status: number }[])[n - 1]?.status ?? 201);
    reply.code(status);
    return { status, n, earlier: req.idempotency?.earlier };
  });
  app.post('/gateway', async (_req, reply) => {
    reply.code(504);
    return { gateway: count(hooks, 'gateway') };
  });
  app.post('/stream', async (req, reply) => {
    count(hooks, 'stream');
    const { chunks, size } = req.body as { chunks: number; size: number };
    reply.code(200).headers({ 'content-type': 'application/octet-stream', location: '/streams/1' });
    return reply.send(Readable.from(streamChunks(chunks, size)));
  });
  app.post('/ledger', { config: { idempotency: { settlement: 'transaction' } } }, async (req, reply) => {
    const n = count(hooks, 'ledger');
    const tx = req.idempotency?.transaction;
    if (tx == null) throw new Error('no transaction');
    const id = await tx.oneFirst(ledgerInsert(String((req.body as { account: string }).account)));
    if (req.headers['x-fail'] === '1') {
      reply.code(500);
      return { failed: n };
    }
    reply.code(201);
    return { entry: id.toString(), n };
  });
  app.post('/charge', { config: { idempotency: { leaseMs: 60_000 } } }, async (req, reply) => {
    const n = count(hooks, 'charge');
    await hooks.charge?.(req.idempotency!.downstreamKey);
    if (config.chargeBlocks === true) await new Promise(() => {});
    reply.code(201);
    return { charged: n, attempt: req.idempotency?.attempt };
  });
  // Code after the response throws (an audit or metrics call): synchronously, or later.
  app.post('/throws-after', (_req, reply) => {
    reply.code(201).send({ thrown: count(hooks, 'throws-after') });
    throw new Error('audit failed after the response');
  });
  app.post('/rejects-after', async (_req, reply) => {
    const n = count(hooks, 'rejects-after');
    reply.code(201).send({ rejected: n });
    const hold = hooks.take();
    if (hold !== undefined) {
      hold.entered(n);
      await hold.released;
    }
    throw new Error('metrics failed after the response');
  });
  // A 201 of `bytes` bytes; with x-break its stream fails after them (after the test's hold).
  app.post('/broken', async (req, reply) => {
    const n = count(hooks, 'broken');
    const { bytes } = req.body as { bytes: number };
    reply.code(201).headers({ 'content-type': 'application/octet-stream', location: `/broken/${n}` });
    if (req.headers['x-break'] === undefined) return reply.send(Buffer.concat(brokenBodyChunks(bytes)));
    return reply.send(brokenStream(bytes, () => held(hooks, n)));
  });
  // The same resource route at the root and in a plugin under the /v2 prefix.
  const payouts = async (req: import('fastify').FastifyRequest, reply: import('fastify').FastifyReply) => {
    reply.code(201);
    return {
      payout: count(hooks, 'payouts'),
      account: (req.params as { id: string }).id,
      currency: (req.query as { currency?: string }).currency ?? null,
    };
  };
  app.post('/accounts/:id/payouts', payouts);
  await app.register(
    async (v2) => {
      v2.post('/accounts/:id/payouts', payouts);
    },
    { prefix: '/v2' },
  );
  app.post('/narrow/accounts/:id/payouts', { config: { idempotency: { fingerprintTarget: 'route' } } }, payouts);
  app.post('/ledger-pool', { config: { idempotency: { settlement: 'transaction' } } }, async (req, reply) => {
    const tx = req.idempotency!.transaction!;
    const account = String((req.body as { account: string }).account);
    const id = await tx.oneFirst(ledgerInsert(account));
    const committed = await (await config.settle.getPool()).oneFirst(ledgerCount(account));
    reply.code(201);
    return { entry: id.toString(), committedBefore: committed };
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as AddressInfo;
  return { url: `http://127.0.0.1:${port}`, hooks, close: () => app.close() };
}
