import type { OutgoingHttpHeaders } from 'node:http';
import { Readable } from 'node:stream';
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest, RouteHandlerMethod } from 'fastify';
import { errorAfterResponse } from './core/after-response.js';
import type { IdempotencyContext } from './core/context.js';
import { type FlowResult, handleRequest } from './core/flow.js';
import type { RequestView } from './core/fingerprint.js';
import { type IdempotencyOptions, type Resolved, resolveOptions, type RouteOptions } from './core/options.js';
import { type HttpAnswer, problem } from './core/problem.js';
import type { CapturedResponse } from '../client/stored-response.js';
import { hasBody } from './request-body.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set while the handler runs under an Idempotency-Key (pg-settle/fastify); null otherwise. */
    idempotency: IdempotencyContext | null;
  }
  interface FastifyContextConfig {
    /** Per-route options of pg-settle/fastify; false turns the middleware off for the route. */
    idempotency?: RouteOptions<FastifyRequest> | false;
  }
}

/** A request whose handler runs under a key: onSend hands its payload to the flow. */
interface Pending {
  readonly resolved: Resolved<FastifyRequest>;
  readonly capture: (captured: CapturedResponse) => void;
  result: Promise<FlowResult>;
  finished: boolean;
}

const pendingByRequest = new WeakMap<FastifyRequest, Pending>();

/**
 * `await app.register(idempotency, { settle, binding })`: a plugin whose hooks apply to every
 * route of the instance it is registered on (it is not encapsulated). Per route:
 * `app.post('/orders', { config: { idempotency: { settlement: 'transaction' } } }, handler)`.
 */
export const idempotency: FastifyPluginAsync<IdempotencyOptions<FastifyRequest>> = async (
  app: FastifyInstance,
  options,
) => {
  const defaults = resolveOptions(options);
  const perRoute = new WeakMap<object, Resolved<FastifyRequest>>();
  const resolvedFor = (route: RouteOptions<FastifyRequest> | undefined): Resolved<FastifyRequest> => {
    if (route === undefined) return defaults;
    let resolved = perRoute.get(route);
    if (resolved === undefined) {
      resolved = resolveOptions(options, route);
      perRoute.set(route, resolved);
    }
    return resolved;
  };

  app.decorateRequest('idempotency', null);

  // A handler that fails after it answered (code after reply.send() throws, or its promise
  // rejects): its response is the one sent and stored; the error is counted and logged, never
  // sent. Without this, Fastify would answer the error while onSend still settles the key.
  app.addHook('onRoute', (route) => {
    const handler = route.handler as (this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) => unknown;
    route.handler = function handleAfterResponse(this: FastifyInstance, request: FastifyRequest, reply: FastifyReply) {
      const late = (error: unknown): undefined => {
        const pending = pendingByRequest.get(request);
        if (pending === undefined || !pending.finished) throw error;
        errorAfterResponse(pending.resolved, request, error, (e) =>
          request.log.error(
            { err: e },
            'pg-settle: the handler failed after its response was complete; the response stands',
          ),
        );
        return undefined;
      };
      let result: unknown;
      try {
        result = handler.call(this, request, reply);
      } catch (error) {
        return late(error);
      }
      if (
        result !== null &&
        typeof result === 'object' &&
        typeof (result as Promise<unknown>).then === 'function' &&
        result !== reply
      ) {
        return (result as Promise<unknown>).then(undefined, late);
      }
      return result;
    } as RouteHandlerMethod;
  });

  app.addHook('preHandler', async (request, reply) => {
    const route = request.routeOptions.config.idempotency;
    if (route === false) return;
    const o = resolvedFor(route);
    const view: RequestView = {
      method: request.method.toUpperCase(),
      // As the client sent it, wherever the plugin and the route are registered (prefixes included).
      url: request.originalUrl,
      route: request.routeOptions.url ?? request.url.split('?')[0] ?? '/',
      headers: request.headers,
      body: request.body,
      hasBody: hasBody(request.headers),
    };
    let startHandler!: () => void;
    const started = new Promise<'started'>((resolve) => {
      startHandler = () => resolve('started');
    });
    let capture!: (captured: CapturedResponse) => void;
    const captured = new Promise<CapturedResponse>((resolve) => {
      capture = resolve;
    });
    const pending: Pending = { resolved: o, capture, result: Promise.resolve({ kind: 'pass' }), finished: false };
    const result = handleRequest(view, request, o, (context) => {
      request.idempotency = context;
      pendingByRequest.set(request, pending);
      startHandler();
      return captured;
    });
    pending.result = result;
    const first = await Promise.race([started, result]);
    if (first === 'started') {
      // A handler that never responds: the flow answers (handler-timeout) without waiting for onSend.
      result.then(
        (late) => {
          if (!pending.finished && late.kind === 'answer') {
            pending.finished = true;
            void sendAnswer(reply, late.answer);
          }
        },
        () => {},
      );
      return;
    }
    if (first.kind === 'answer') return sendAnswer(reply, first.answer);
  });

  app.addHook('onSend', async (request, reply, payload) => {
    const pending = pendingByRequest.get(request);
    if (pending === undefined || pending.finished) return payload;
    pending.finished = true;
    // The handler's response is complete: from here Fastify treats the reply as sent, so a later
    // throw or rejection of the handler is not answered in its place (and a handler that called
    // reply.send() without returning it does not send twice). The payload still goes out below.
    reply.hijack();
    const o = pending.resolved;
    let read: Awaited<ReturnType<typeof readPayload>>;
    let broken: HttpAnswer | null = null;
    try {
      read = await readPayload(payload, o.maxBodyBytes);
    } catch (error) {
      // A payload stream that failed before its first byte left (it is read up to maxBodyBytes
      // before anything is sent): answered in its place, recorded per the response policy (a
      // 500: a retryable failure), logged as Fastify logs a failed stream.
      request.log.error({ err: error }, 'pg-settle: the response payload failed before its first byte was sent');
      broken = problem(
        'response-broken',
        o.problemTypeBase,
        'the response failed before it was complete; nothing of it was sent or stored',
      );
      read = { body: broken.body, rest: null };
    }
    pending.capture(
      broken === null
        ? {
            status: reply.statusCode,
            headers: reply.getHeaders() as OutgoingHttpHeaders,
            body: read.body,
            overflowed: read.rest !== null || read.body.length > o.maxBodyBytes,
          }
        : { status: broken.status, headers: broken.headers, body: broken.body, overflowed: false },
    );
    let result: FlowResult;
    try {
      result = await pending.result;
    } catch {
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
    const answer = result.kind === 'answer' ? result.answer : broken;
    if (answer !== null) {
      for (const name of Object.keys(reply.getHeaders())) reply.removeHeader(name);
      reply.code(answer.status).headers(answer.headers);
      return answer.body;
    }
    if (read.rest === null) return read.body;
    const rest = read.rest;
    const head = read.body;
    return Readable.from(
      (async function* () {
        yield head;
        for (let next = await rest.next(); next.done !== true; next = await rest.next()) yield next.value;
      })(),
    );
  });
};

// Hooks apply to the instance the plugin is registered on, not only inside it (fastify-plugin's flag).
(idempotency as unknown as Record<symbol, boolean>)[Symbol.for('skip-override')] = true;
(idempotency as unknown as Record<symbol, string>)[Symbol.for('fastify.display-name')] = 'pg-settle-idempotency';

function sendAnswer(reply: FastifyReply, answer: HttpAnswer): FastifyReply {
  return reply.code(answer.status).headers(answer.headers).send(answer.body);
}

/** The payload as bytes, up to maxBytes + 1; a longer stream keeps its iterator in `rest`. */
async function readPayload(
  payload: unknown,
  maxBytes: number,
): Promise<{ body: Buffer; rest: AsyncIterator<unknown> | null }> {
  if (payload === null || payload === undefined) return { body: Buffer.alloc(0), rest: null };
  if (typeof payload === 'string') return { body: Buffer.from(payload), rest: null };
  if (Buffer.isBuffer(payload)) return { body: payload, rest: null };
  if (payload instanceof Uint8Array) return { body: Buffer.from(payload), rest: null };
  if (payload instanceof Readable || (typeof payload === 'object' && Symbol.asyncIterator in payload)) {
    const iterator = (payload as AsyncIterable<unknown>)[Symbol.asyncIterator]();
    const chunks: Buffer[] = [];
    let size = 0;
    for (let next = await iterator.next(); next.done !== true; next = await iterator.next()) {
      const chunk = Buffer.isBuffer(next.value) ? next.value : Buffer.from(String(next.value));
      chunks.push(chunk);
      size += chunk.length;
      if (size > maxBytes) return { body: Buffer.concat(chunks), rest: iterator };
    }
    return { body: Buffer.concat(chunks), rest: null };
  }
  return { body: Buffer.from(String(payload)), rest: null };
}

export default idempotency;
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
