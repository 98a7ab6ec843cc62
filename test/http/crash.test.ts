// A server process killed mid-handler: after its lease lapses, the retry takes the key over, and
// the effect happens once because the handler passes a downstream key.
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { expireLease } from '../../src/testing/clock.js';
import { asRole } from '../client/helpers.js';
import { ALL_FRAMEWORKS, startApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest, until } from './support.js';

const SCRIPT = fileURLToPath(new URL('./fixtures/crash-server.ts', import.meta.url));

function startServerProcess(framework: string, url: string): { child: ChildProcess; lines: Record<string, string>[] } {
  const child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, framework, url], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const lines: Record<string, string>[] = [];
  createInterface({ input: child.stdout! }).on('line', (line) =>
    lines.push(JSON.parse(line) as Record<string, string>),
  );
  return { child, lines };
}

let ctx: HttpTestContext;
beforeAll(async () => {
  ctx = await setupHttpTest('http_crash');
});
afterAll(async () => {
  await ctx?.close();
});

describe.each(ALL_FRAMEWORKS)('%s', (framework) => {
  test('SIGKILL mid-handler: the retry after the lease lapses takes over; the downstream effect happens once', {
    timeout: 180_000,
  }, async () => {
    const { child, lines } = startServerProcess(framework, asRole(ctx.db.url, 'settle_app'));
    try {
      const { url } = await until(async () => lines.find((l) => l.url !== undefined), 60_000);
      const key = newKey();
      const lost = send(`${url}/charge`, { key, json: { amount: '9.99' } }).catch((error: unknown) => error);
      const { effect } = await until(async () => lines.find((l) => l.effect !== undefined));
      child.kill('SIGKILL');
      expect(await lost).toBeInstanceOf(Error); // the connection died with the process

      // The dead handler's lease is still live: a retry now is told to come back later.
      const app = await startApp(framework, {
        settle: ctx.settle,
        charge: async (downstreamKey) => {
          await ctx.su.query(
            'insert into http_downstream_charges (downstream_key) values ($1) on conflict do nothing',
            [downstreamKey],
          );
        },
      });
      try {
        const early = await send(`${app.url}/charge`, { key, json: { amount: '9.99' } });
        expect(early.status).toBe(409);
        expect(await expireLease(ctx.su, 'acme', key)).toBe(true); // the lease lapses (database clock)
        const retry = await send(`${app.url}/charge`, { key, json: { amount: '9.99' } });
        expect(retry.status).toBe(201);
        expect(retry.json()).toMatchObject({ attempt: 2 });
        const replay = await send(`${app.url}/charge`, { key, json: { amount: '9.99' } });
        expect(replay.body.equals(retry.body)).toBe(true);
        expect(app.hooks.calls.charge).toBe(1);
      } finally {
        await app.close();
      }
      const charges = await ctx.su.query<{ downstream_key: string }>(
        'select downstream_key from http_downstream_charges where downstream_key = $1',
        [effect],
      );
      expect(charges.rows).toHaveLength(1);
      const attempts = await ctx.admin.attempts({ tenant: 'acme', key });
      expect(attempts.map((a) => [a.attempt, a.endReason, a.settled])).toEqual([
        [1, 'lease_expired', false],
        [2, 'observed', true],
      ]);
    } finally {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    }
  });
});
