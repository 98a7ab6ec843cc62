import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import { performance } from 'node:perf_hooks';

/**
 * Concurrent HTTP clients over loopback for the HTTP benches (bench/http.ts and the `http`
 * scenario of npm run bench): `clients` loops, each sending POST /payments back to back, every
 * answer checked (201, and replayed exactly when a replay is expected).
 */

export interface HttpRun {
  readonly requests: number;
  readonly elapsedMs: number;
  /** Milliseconds per request, in completion order. */
  readonly latencies: number[];
}

/** The server's base URL once it listens. */
export async function listen(server: Server): Promise<string> {
  if (!server.listening) await new Promise((resolve) => server.once('listening', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => server.close(() => resolve()));
}

/** POST /payments as `token` ("<tenant>:<user>"), with an Idempotency-Key when `key` is given. */
export function postPayment(url: string, key: string | null, token: string): Promise<Response> {
  return fetch(`${url}/payments`, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      authorization: `Bearer ${token}`,
      ...(key === null ? {} : { 'idempotency-key': `"${key}"` }),
    },
    body: JSON.stringify({ amount: '19.99' }),
  });
}

export interface DriveOptions {
  readonly clients: number;
  /** Run for this many milliseconds ... */
  readonly ms?: number;
  /** ... or this many requests per client (a counted run). */
  readonly perClient?: number;
  /** The next request's key (null: no Idempotency-Key header). */
  readonly key: () => string | null;
  /** Whether every answer must be a replay (header idempotent-replayed: true). */
  readonly replayed: boolean;
  readonly token: string;
  /** What the failure says: the scenario's name. */
  readonly name: string;
}

/** Drives `url` with `clients` concurrent loops; throws on the first unexpected answer. */
export async function driveHttp(url: string, opts: DriveOptions): Promise<HttpRun> {
  if ((opts.ms === undefined) === (opts.perClient === undefined)) throw new Error('driveHttp: give ms or perClient');
  const latencies: number[] = [];
  const started = performance.now();
  const deadline = started + (opts.ms ?? 0);
  await Promise.all(
    Array.from({ length: opts.clients }, async () => {
      for (let sent = 0; opts.ms !== undefined ? performance.now() < deadline : sent < (opts.perClient ?? 0); sent++) {
        const t0 = performance.now();
        const response = await postPayment(url, opts.key(), opts.token);
        const body = await response.text();
        latencies.push(performance.now() - t0);
        const replayed = response.headers.get('idempotent-replayed') === 'true';
        if (response.status !== 201 || replayed !== opts.replayed) {
          throw new Error(
            `${opts.name}: unexpected answer ${response.status} replayed=${replayed}: ${body.slice(0, 200)}`,
          );
        }
      }
    }),
  );
  return { requests: latencies.length, elapsedMs: performance.now() - started, latencies };
}
