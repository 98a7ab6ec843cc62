import { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingHttpHeaders, OutgoingHttpHeaders } from 'node:http';
import type { CapturedResponse } from '../client/stored-response.js';
import type { IdempotencyContext } from './core/context.js';
import type { RequestView } from './core/fingerprint.js';
import { handleRequest } from './core/flow.js';
import { type IdempotencyOptions, type Resolved, resolveOptions, type RouteOptions } from './core/options.js';
import { type HttpAnswer, problem } from './core/problem.js';

/** A Web-standard handler: Next.js route handlers, Bun.serve, Deno.serve, Cloudflare-style fetch. */
export type FetchHandler<A extends unknown[] = []> = (request: Request, ...rest: A) => Response | Promise<Response>;

/**
 * What the middleware form needs of a framework's context: the Request as `c.req.raw`, the route
 * pattern as `c.req.routePath` when there is one, and the response as a settable `c.res` (Hono).
 */
export interface FetchMiddlewareContext {
  readonly req: {
    readonly raw: Request;
    readonly routePath?: string;
    /** The body from the framework's cache, when a middleware before this one read it (Hono). */
    arrayBuffer?(): Promise<ArrayBuffer>;
  };
  res: Response | undefined;
}

/** What createIdempotency() returns: a handler wrapper, with the `(c, next)` middleware form as `.middleware()`. */
export interface FetchIdempotency {
  /**
   * Wraps a handler: `export const POST = idempotency(handler)` (Next.js), `Bun.serve({ fetch:
   * idempotency(handler) })`, `Deno.serve(idempotency(handler))`. Arguments after the Request are
   * passed through. The handler reads its context with `idempotencyOf(request)`.
   */
  <A extends unknown[]>(
    handler: FetchHandler<A>,
    route?: RouteOptions<Request>,
  ): (request: Request, ...rest: A) => Promise<Response>;
  /**
   * The same as a `(c, next)` middleware (Hono): `app.post('/orders', idempotency.middleware(),
   * handler)`; the handler reads its context with `idempotencyOf(c.req.raw)`.
   */
  middleware(route?: RouteOptions<Request>): (c: FetchMiddlewareContext, next: () => Promise<void>) => Promise<void>;
}

const contexts = new WeakMap<Request, IdempotencyContext>();

/** The context of a request that runs under an Idempotency-Key; null otherwise. */
export function idempotencyOf(request: Request): IdempotencyContext | null {
  return contexts.get(request) ?? null;
}

/**
 * `const idempotency = createIdempotency({ settle, binding })`: the Idempotency-Key middleware for
 * Web-standard Request/Response handlers, with the options and answers of pg-settle/express.
 * `binding` gets the Request.
 */
export function createIdempotency(options: IdempotencyOptions<Request>): FetchIdempotency {
  resolveOptions(options); // validate early (and warn once without a binding resolver)
  const wrap = <A extends unknown[]>(handler: FetchHandler<A>, route?: RouteOptions<Request>) => {
    const o = resolveOptions(options, route);
    return (request: Request, ...rest: A): Promise<Response> =>
      handle(o, request, undefined, undefined, async () => handler(request, ...rest));
  };
  wrap.middleware = (route?: RouteOptions<Request>) => {
    const o = resolveOptions(options, route);
    return async (c: FetchMiddlewareContext, next: () => Promise<void>): Promise<void> => {
      let sent: Response | undefined;
      const cached = c.req.arrayBuffer === undefined ? undefined : () => c.req.arrayBuffer!();
      const response = await handle(o, c.req.raw, c.req.routePath, cached, async () => {
        await next();
        // Answered before the handler finished (handler timeout): the framework kept our answer
        // as c.res and dropped the handler's response, so there is nothing to settle late; the
        // attempt stays reported unknown.
        if (sent !== undefined && c.res === sent) return new Promise<Response>(() => {});
        return c.res ?? new Response(null, { status: 404 });
      });
      sent = response;
      // Setting c.res merges the previous response's headers into the new one (Hono): clear it
      // first, so an answer in the handler's place carries none of the handler's headers.
      if (response === c.res) return;
      c.res = undefined;
      c.res = response;
    };
  };
  return wrap;
}

/** The handler's response once it is complete or has overflowed the store limit. */
interface Produced {
  readonly response: Response;
  readonly head: Buffer;
  /** The rest of an overflowed body, still to be streamed; null when the body was read whole. */
  readonly rest: ReadableStreamDefaultReader<Uint8Array> | null;
}

async function handle(
  o: Resolved<Request>,
  request: Request,
  route: string | undefined,
  cachedBody: (() => Promise<ArrayBuffer>) | undefined,
  run: () => Promise<Response>,
): Promise<Response> {
  if (!o.methods.has(request.method.toUpperCase())) return run();
  const view = await viewOf(request, route, cachedBody);
  // Transaction mode calls the handler from inside the request transaction: run it in the
  // request's own async context, as the Express and Fastify adapters do.
  const inRequestContext = o.settlement === 'transaction' ? AsyncLocalStorage.snapshot() : null;
  let started = false;
  let answered = false;
  let produced: Produced | undefined;
  let thrown: { error: unknown } | undefined;
  const runHandler = async (context: IdempotencyContext): Promise<CapturedResponse> => {
    contexts.set(request, context);
    started = true;
    let response: Response;
    let read: Awaited<ReturnType<typeof readBody>>;
    try {
      response = await (inRequestContext === null ? run() : inRequestContext(run));
      // A body that fails while it is read here fails before its first byte left: the same as a throw.
      read = await readBody(response, o.maxBodyBytes);
    } catch (error) {
      // What the host answers for a throw (a 500): not stored, a retry runs the handler again.
      thrown = { error };
      return { status: 500, headers: {}, body: Buffer.alloc(0), overflowed: false };
    }
    produced = { response, head: read.head, rest: read.rest };
    if (answered) void read.rest?.cancel().catch(() => {});
    return {
      status: response.status,
      headers: headersOf(response.headers),
      body: read.head,
      overflowed: read.rest !== null || read.head.length > o.maxBodyBytes,
    };
  };
  let result: Awaited<ReturnType<typeof handleRequest>>;
  try {
    result = await handleRequest(view, request, o, runHandler);
  } catch (error) {
    if (!started) throw error;
    result = {
      kind: 'answer',
      answer: problem(
        'settlement-unavailable',
        o.problemTypeBase,
        'the outcome of this request is unknown; retry with the same key',
        {},
        { 'retry-after': '1' },
      ),
    };
  }
  if (result.kind === 'pass') return run();
  if (result.kind === 'answer') {
    answered = true;
    void produced?.rest?.cancel().catch(() => {});
    return answerResponse(result.answer);
  }
  if (thrown !== undefined) throw thrown.error;
  if (produced === undefined) throw new Error('pg-settle: the handler produced no response');
  return replayable(produced);
}

/**
 * The request as the core sees it. The body is read from a clone, so the handler still reads it;
 * a body something before the middleware already consumed comes from the framework's cache, or,
 * without one, cannot be fingerprinted (the core answers 500 idempotency-misconfigured).
 */
async function viewOf(
  request: Request,
  route: string | undefined,
  cachedBody: (() => Promise<ArrayBuffer>) | undefined,
): Promise<RequestView> {
  const url = new URL(request.url);
  const headers: IncomingHttpHeaders = Object.fromEntries(request.headers);
  const target = {
    method: request.method.toUpperCase(),
    url: `${url.pathname}${url.search}`,
    route: route ?? url.pathname,
    headers,
  };
  if (request.body !== null && request.bodyUsed && cachedBody === undefined)
    return { ...target, body: undefined, hasBody: true };
  let bytes: Buffer;
  if (request.body === null) bytes = Buffer.alloc(0);
  else if (request.bodyUsed) bytes = Buffer.from(await cachedBody!());
  else bytes = Buffer.from(await request.clone().arrayBuffer());
  return {
    ...target,
    body: bytes.length === 0 ? undefined : parseBody(bytes, request.headers.get('content-type')),
    hasBody: bytes.length > 0,
  };
}

/**
 * The body as Express's json() and text() parsers hand it over, so a key's fingerprint is the same
 * behind either adapter: JSON as its value, text as a string, anything else (or JSON that does not
 * parse) as bytes.
 */
function parseBody(bytes: Buffer, contentType: string | null): unknown {
  const type = (contentType ?? '').split(';')[0]!.trim().toLowerCase();
  if (type === 'application/json' || type.endsWith('+json')) {
    try {
      return JSON.parse(bytes.toString('utf8')) as unknown;
    } catch {
      return bytes;
    }
  }
  if (type.startsWith('text/')) return bytes.toString('utf8');
  return bytes;
}

function headersOf(headers: Headers): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of headers) if (name !== 'set-cookie') out[name] = value;
  const cookies = headers.getSetCookie();
  if (cookies.length > 0) out['set-cookie'] = cookies;
  return out;
}

/** The body up to maxBytes + 1 bytes; a longer one keeps its reader in `rest`. */
async function readBody(
  response: Response,
  maxBytes: number,
): Promise<{ head: Buffer; rest: ReadableStreamDefaultReader<Uint8Array> | null }> {
  if (response.body === null) return { head: Buffer.alloc(0), rest: null };
  const reader = response.body.getReader();
  const chunks: Buffer[] = [];
  let size = 0;
  for (let next = await reader.read(); !next.done; next = await reader.read()) {
    const chunk = Buffer.from(next.value.buffer, next.value.byteOffset, next.value.byteLength);
    chunks.push(chunk);
    size += chunk.length;
    if (size > maxBytes) return { head: Buffer.concat(chunks), rest: reader };
  }
  return { head: Buffer.concat(chunks), rest: null };
}

/** The handler's response again, its body read (and the rest of an overflowed one streamed on). */
function replayable({ response, head, rest }: Produced): Response {
  const init = { status: response.status, statusText: response.statusText, headers: response.headers };
  if (rest === null) return new Response(head.length === 0 ? null : asBody(head), init);
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(head);
    },
    async pull(controller) {
      const next = await rest.read();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    cancel(reason) {
      return rest.cancel(reason);
    },
  });
  return new Response(stream, init);
}

/** Our Buffers are made by Buffer.concat / Buffer.from over plain ArrayBuffers, never shared memory. */
const asBody = (buffer: Buffer): Uint8Array<ArrayBuffer> => buffer as Uint8Array<ArrayBuffer>;

function answerResponse(answer: HttpAnswer): Response {
  return new Response(answer.body.length === 0 ? null : asBody(answer.body), {
    status: answer.status,
    headers: answer.headers,
  });
}

export type { IdempotencyContext } from './core/context.js';
export { downstreamKeyOf } from './core/context.js';
export { byKeyPrefix } from './core/key-prefix.js';
export type {
  IdempotencyBinding,
  IdempotencyOptions,
  InDoubtKey,
  ResponseDecision,
  RouteOptions,
} from './core/options.js';
export { defaultResponsePolicy } from './core/options.js';
export { PROBLEMS } from './core/problem.js';
