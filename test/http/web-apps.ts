// The test app of apps.ts for Web-standard handlers (pg-settle/fetch): on Hono with
// @hono/node-server, and as a plain fetch handler served by node:http. No vitest imports.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { createAdaptorServer } from '@hono/node-server';
import { Hono } from 'hono';
import { sql } from 'slonik';
import { z } from 'zod';
import { createIdempotency, type FetchIdempotency, idempotencyOf } from '../../src/http/fetch.js';
import type { RouteOptions } from '../../src/http/core/options.js';
import type { AppConfig, AppHooks, TestApp } from './apps.js';

export type WebFramework = 'hono' | 'fetch';
export const WEB_FRAMEWORKS: readonly WebFramework[] = ['hono', 'fetch'];

/** 1 000-byte chunks of `bytes` bytes of "b": the body of /broken (here and in apps.ts). */
export const brokenBodyChunks = (bytes: number): Buffer[] =>
  Array.from({ length: Math.ceil(bytes / 1000) }, (_, i) => Buffer.alloc(Math.min(1000, bytes - i * 1000), 'b'));

type Route = (request: Request) => Promise<Response>;
interface Mounted {
  readonly method: string;
  readonly path: string;
  readonly options: RouteOptions<Request> | false;
  readonly route: Route;
}

interface Holds {
  take(): { entered: (n: number) => void; released: Promise<void> } | undefined;
}

function makeHooks(charge?: (downstreamKey: string) => Promise<void>): AppHooks & Holds {
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
const json = (status: number, value: unknown, headers: Record<string, string> = {}): Response =>
  new Response(JSON.stringify(value), { status, headers: { 'content-type': 'application/json', ...headers } });
const ledgerInsert = (account: string) => sql.type(z.object({ id: z.bigint() }))`
  insert into http_ledger (account, amount) values (${account}, 100) returning id`;

/** The routes of apps.ts's app, as Web-standard handlers. */
function routes(config: AppConfig, hooks: AppHooks & Holds): Mounted[] {
  const held = async (name: string): Promise<number> => {
    const n = count(hooks, name);
    const hold = hooks.take();
    if (hold !== undefined) {
      hold.entered(n);
      await hold.released;
    }
    return n;
  };
  const orders: Route = async (request) => {
    const body = (await request.json()) as unknown;
    const n = await held('orders');
    const response = json(
      201,
      { order: n, attempt: idempotencyOf(request)?.attempt, body },
      { location: `/orders/${n}`, etag: `"v${n}"`, 'x-trace': `t-${n}` },
    );
    response.headers.append('set-cookie', `session=s${n}; Path=/`);
    return response;
  };
  const ordersOptions = (config.orders as RouteOptions<Request> | undefined) ?? {};
  return [
    { method: 'POST', path: '/orders', options: ordersOptions, route: orders },
    { method: 'PATCH', path: '/orders', options: ordersOptions, route: orders },
    { method: 'GET', path: '/orders', options: {}, route: async () => json(200, { get: count(hooks, 'get') }) },
    {
      method: 'POST',
      path: '/slow',
      options: { handlerTimeoutMs: config.slowTimeoutMs ?? 60_000 },
      route: async () => json(201, { slow: await held('slow') }),
    },
    {
      method: 'POST',
      path: '/optional',
      options: { required: false },
      route: async () => json(201, { optional: count(hooks, 'optional') }),
    },
    {
      method: 'POST',
      path: '/strict',
      options: { strict: true },
      route: async () => json(201, { strict: count(hooks, 'strict') }),
    },
    {
      method: 'POST',
      path: '/text',
      options: {},
      route: async (request) =>
        new Response(`text ${count(hooks, 'text')}: ${await request.text()}`, {
          status: 201,
          headers: { 'content-type': 'text/plain' },
        }),
    },
    {
      method: 'POST',
      path: '/status',
      options: { rerunAfterUnknown: true },
      route: async (request) => {
        const n = count(hooks, 'status');
        const status = Number(((await request.json()) as { status: number }[])[n - 1]?.status ?? 201);
        return json(status, { status, n, earlier: idempotencyOf(request)?.earlier });
      },
    },
    {
      method: 'POST',
      path: '/gateway',
      options: {},
      route: async () => json(504, { gateway: count(hooks, 'gateway') }),
    },
    {
      method: 'POST',
      path: '/stream',
      options: {},
      route: async (request) => {
        count(hooks, 'stream');
        const { chunks, size } = (await request.json()) as { chunks: number; size: number };
        let i = 0;
        const body = new ReadableStream<Uint8Array>({
          pull(controller) {
            if (i === chunks) controller.close();
            else controller.enqueue(new Uint8Array(Buffer.alloc(size, String.fromCharCode(97 + (i++ % 26)))));
          },
        });
        return new Response(body, {
          status: 200,
          headers: { 'content-type': 'application/octet-stream', location: '/streams/1' },
        });
      },
    },
    {
      method: 'POST',
      path: '/ledger',
      options: { settlement: 'transaction' },
      route: async (request) => {
        const n = count(hooks, 'ledger');
        const tx = idempotencyOf(request)?.transaction;
        if (tx == null) throw new Error('no transaction');
        const id = await tx.oneFirst(ledgerInsert(String(((await request.json()) as { account: string }).account)));
        if (request.headers.get('x-fail') === '1') return json(500, { failed: n });
        return json(201, { entry: id.toString(), n });
      },
    },
    {
      // Throws on its first call: the host's 500 (Hono's onError, the node:http bridge below).
      method: 'POST',
      path: '/throws',
      options: {},
      route: async (request) => {
        const n = count(hooks, 'throws');
        if (n === 1) throw new Error('the handler failed');
        return json(201, { n, attempt: idempotencyOf(request)?.attempt });
      },
    },
    {
      // A 201 of `bytes` bytes; with x-break its body stream fails after them (after the test's hold).
      method: 'POST',
      path: '/broken',
      options: {},
      route: async (request) => {
        const n = count(hooks, 'broken');
        const { bytes } = (await request.json()) as { bytes: number };
        const init = { status: 201, headers: { 'content-type': 'application/octet-stream', location: `/broken/${n}` } };
        const chunks = brokenBodyChunks(bytes);
        if (request.headers.get('x-break') === null) return new Response(new Uint8Array(Buffer.concat(chunks)), init);
        const body = new ReadableStream<Uint8Array>({
          async pull(controller) {
            const chunk = chunks.shift();
            if (chunk !== undefined) return controller.enqueue(new Uint8Array(chunk));
            const hold = hooks.take();
            if (hold !== undefined) {
              hold.entered(n);
              await hold.released;
            }
            controller.error(new Error('the body broke off'));
          },
        });
        return new Response(body, init);
      },
    },
    {
      method: 'POST',
      path: '/charge',
      options: { leaseMs: 60_000 },
      route: async (request) => {
        const n = count(hooks, 'charge');
        const context = idempotencyOf(request)!;
        await hooks.charge?.(context.downstreamKey);
        if (config.chargeBlocks === true) await new Promise(() => {});
        return json(201, { charged: n, attempt: context.attempt });
      },
    },
  ];
}

function idempotencyFor(config: AppConfig): FetchIdempotency {
  return createIdempotency({
    settle: config.settle,
    binding: (request) => ({
      tenant: request.headers.get('x-tenant') ?? 'acme',
      principal: request.headers.get('x-user') ?? 'alice',
      scopes: ['orders:write'],
      generation: 1,
    }),
    ...(config.maxBodyBytes === undefined ? {} : { maxBodyBytes: config.maxBodyBytes }),
    ...(config.waitForMs === undefined ? {} : { waitForMs: config.waitForMs }),
    ...(config.onErrorAfterResponse === undefined ? {} : { onErrorAfterResponse: config.onErrorAfterResponse }),
  });
}

export async function startWebApp(framework: WebFramework, config: AppConfig): Promise<TestApp> {
  const hooks = makeHooks(config.charge);
  const idempotency = idempotencyFor(config);
  const mounted = routes(config, hooks);
  const server =
    framework === 'hono' ? honoServer(idempotency, mounted, hooks) : fetchServer(idempotency, mounted, hooks);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
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

function honoServer(idempotency: FetchIdempotency, mounted: readonly Mounted[], hooks: AppHooks): Server {
  const app = new Hono();
  // Hono's own answer to an error (its default onError logs it and answers this).
  app.onError((error, c) => {
    hooks.errors.push(error.message);
    return c.text('Internal Server Error', 500);
  });
  for (const { method, path, options, route } of mounted) {
    const handler = (c: { req: { raw: Request } }) => route(c.req.raw);
    if (options === false) app.on(method, path, handler);
    else app.on(method, path, idempotency.middleware(options), handler);
  }
  return createAdaptorServer({ fetch: app.fetch }) as Server;
}

/** A plain fetch handler per route, served by node:http through a minimal Request/Response bridge. */
function fetchServer(idempotency: FetchIdempotency, mounted: readonly Mounted[], hooks: AppHooks): Server {
  const handlers = new Map(
    mounted.map(({ method, path, options, route }) => [
      `${method} ${path}`,
      options === false ? route : idempotency(route, options),
    ]),
  );
  return createServer(async (req, res) => {
    const url = new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`);
    const handler = handlers.get(`${req.method === 'HEAD' ? 'GET' : req.method} ${url.pathname}`);
    if (handler === undefined) {
      res.writeHead(404).end();
      return;
    }
    const headers = new Headers();
    for (const [name, value] of Object.entries(req.headers))
      for (const one of Array.isArray(value) ? value : [value ?? '']) headers.append(name, one);
    const withBody = req.method !== 'GET' && req.method !== 'HEAD';
    const request = new Request(url, {
      method: req.method ?? 'GET',
      headers,
      ...(withBody ? { body: Readable.toWeb(req) as ReadableStream<Uint8Array>, duplex: 'half' } : {}),
    } as RequestInit);
    let response: Response;
    try {
      response = await handler(request);
    } catch (error) {
      hooks.errors.push((error as Error).message);
      res.writeHead(500).end();
      return;
    }
    res.statusCode = response.status;
    for (const [name, value] of response.headers) if (name !== 'set-cookie') res.setHeader(name, value);
    const cookies = response.headers.getSetCookie();
    if (cookies.length > 0) res.setHeader('set-cookie', cookies);
    try {
      if (response.body !== null) for await (const chunk of response.body) res.write(chunk);
      res.end();
    } catch (error) {
      hooks.errors.push((error as Error).message);
      res.destroy(); // a body that fails after its head went out: close, as the platforms do
    }
  });
}
