import { AsyncLocalStorage } from 'node:async_hooks';
import type { NextFunction, Request, RequestHandler, Response } from 'express';
import { errorAfterResponse, ResponseAfterResponseError } from './core/after-response.js';
import type { IdempotencyContext } from './core/context.js';
import { handleRequest } from './core/flow.js';
import type { RequestView } from './core/fingerprint.js';
import { type IdempotencyOptions, resolveOptions, type RouteOptions } from './core/options.js';
import { type HttpAnswer, problem } from './core/problem.js';
import { captureResponse, type ResponseCapture } from './response-capture.js';
import { hasBody } from './request-body.js';

declare global {
  // eslint-disable-next-line @typescript-eslint/no-namespace
  namespace Express {
    interface Request {
      /** Set while the handler runs under an Idempotency-Key (pg-settle/express). */
      idempotency?: IdempotencyContext;
    }
  }
}

/** The middleware factory createIdempotency() returns: call it per route, with optional route options. */
export type ExpressIdempotency = (route?: RouteOptions<Request>) => RequestHandler;

/**
 * `const idempotency = createIdempotency({ settle, binding })`, then per route
 * `app.post('/orders', express.json(), idempotency(), handler)` (or `app.use(idempotency())`
 * after the body parser). `idempotency({ ...overrides })` configures one route.
 */
export function createIdempotency(options: IdempotencyOptions<Request>): ExpressIdempotency {
  resolveOptions(options); // validate early (and warn once without a binding resolver)
  return (route) => {
    const o = resolveOptions(options, route);
    return (req: Request, res: Response, next: NextFunction): void => {
      const routePath = req.route?.path;
      const view: RequestView = {
        method: req.method.toUpperCase(),
        // As the client sent it, wherever the middleware is mounted (app.use, a router, a route).
        url: req.originalUrl,
        route: `${req.baseUrl}${routePath === undefined ? req.path : String(routePath)}`,
        headers: req.headers,
        body: req.body,
        hasBody: hasBody(req.headers),
      };
      // Transaction mode calls the handler from inside the request transaction: run it in the
      // request's own async context instead, as Fastify does, so slonik's transaction context
      // does not leak into it (a query through settle.getPool() works the same on both).
      const inRequestContext = o.settlement === 'transaction' ? AsyncLocalStorage.snapshot() : null;
      let capture: ResponseCapture | undefined;
      handleRequest(view, req, o, (context) => {
        req.idempotency = context;
        capture = captureResponse(res, o.maxBodyBytes, (sent, discarded) => {
          errorAfterResponse(o, req, new ResponseAfterResponseError(sent, discarded), (error) =>
            console.error((error as Error).message),
          );
        });
        if (inRequestContext === null) next();
        else inRequestContext(() => next());
        return capture.done;
      }).then(
        (result) => {
          if (result.kind === 'pass') next();
          else if (capture === undefined) sendDirect(res, result.kind === 'answer' ? result.answer : undefined);
          else if (result.kind === 'answer') capture.answer(result.answer);
          else capture.release();
        },
        (error: unknown) => {
          if (capture === undefined) next(error);
          else
            capture.answer(
              problem(
                'settlement-unavailable',
                o.problemTypeBase,
                'the outcome of this request is unknown; retry with the same key',
                {},
                { 'retry-after': '1' },
              ),
            );
        },
      );
    };
  };
}

function sendDirect(res: Response, answer: HttpAnswer | undefined): void {
  if (answer === undefined) return;
  res.status(answer.status);
  for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
  res.end(answer.body);
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
