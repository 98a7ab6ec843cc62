// A key of the Idempotency-Key middleware stuck in doubt (the handler answered 504), resolved by
// an operator with the CLI: a plain result is refused, saying why (it would make every retry
// answer 500 idempotency-misconfigured for good); an HTTP-aware resolution stores the response in
// the middleware's format, and the retry replays it. Real middleware (Express), real CLI binary,
// the operator as a settle_admin login.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test, vi } from 'vitest';
import { createSettleClient, type SettleClient } from '../../src/index.js';
import { asRole } from '../client/helpers.js';
import { runCli } from '../support/cli.js';
import { startApp, type TestApp } from './apps.js';
import { type HttpTestContext, newKey, send, setupHttpTest } from './support.js';

const PROBLEM = 'urn:pg-settle:problem:';

// The CLI starts from source several times: minutes of headroom on a loaded machine.
vi.setConfig({ testTimeout: 300_000 });

describe('resolving an in-doubt HTTP key with pg-settle resolve', () => {
  let ctx: HttpTestContext;
  let settle: SettleClient;
  let app: TestApp;
  let dir: string;

  beforeAll(async () => {
    ctx = await setupHttpTest('http_resolve');
    settle = createSettleClient({ connectionString: asRole(ctx.db.url, 'settle_app'), poolSize: 4 });
    app = await startApp('express', { settle });
    dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-http-resolve-'));
  });
  afterAll(async () => {
    await app?.close();
    await settle?.end();
    await ctx?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  const operator = (args: readonly string[]) =>
    runCli(args, { databaseUrl: asRole(ctx.db.url, 'settle_admin'), timeoutMs: 60_000 });

  test('a plain result is refused, saying why; --http-status/--http-body resolves it and the retry replays the stored response', async () => {
    const key = newKey();
    expect((await send(`${app.url}/gateway`, { key, json: { amount: 5 } })).status).toBe(504);
    const stuck = await send(`${app.url}/gateway`, { key, json: { amount: 5 } });
    expect(stuck.status).toBe(500);
    expect(stuck.json()).toMatchObject({ type: `${PROBLEM}outcome-unknown` });
    expect(await ctx.admin.inspect({ tenant: 'acme', key })).toMatchObject({ status: 'unknown', attempt: 1 });

    const plain = await operator([
      'resolve',
      'acme',
      key,
      '--expected-attempt',
      '1',
      '--completed',
      '--result',
      '{"payout":"po_1"}',
      '--reason',
      'INC-9: PSP paid po_1',
      '--yes',
    ]);
    expect(plain.code).toBe(2);
    expect(plain.stderr).toContain('HTTP Idempotency-Key middleware');
    expect(plain.stderr).toContain('idempotency-misconfigured');
    expect(plain.stderr).toContain('--http-status');
    expect(await ctx.admin.inspect({ tenant: 'acme', key })).toMatchObject({ status: 'unknown' });

    const bodyFile = path.join(dir, 'payout.json');
    await writeFile(bodyFile, '{"payout":"po_1","status":"paid"}');
    const resolved = await operator([
      'resolve',
      'acme',
      key,
      '--expected-attempt',
      '1',
      '--expected-status',
      'unknown',
      '--completed',
      '--http-status',
      '201',
      '--http-body',
      `@${bodyFile}`,
      '--http-header',
      'Location: /payouts/po_1',
      '--reason',
      'INC-9: PSP paid po_1',
      '--yes',
      '--json',
    ]);
    expect(resolved.code, resolved.stderr).toBe(0);
    expect(resolved.json).toMatchObject({ outcome: 'resolved', status: 'completed', statusBefore: 'unknown' });

    const replay = await send(`${app.url}/gateway`, { key, json: { amount: 5 } });
    expect(replay.status).toBe(201);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.headers.get('location')).toBe('/payouts/po_1');
    expect(replay.body.toString('utf8')).toBe('{"payout":"po_1","status":"paid"}');
    expect(app.hooks.calls.gateway).toBe(1); // the handler never ran again
  });

  test('a JSON body gets content-type application/json unless headers are given; bad HTTP flags are usage errors', async () => {
    const key = newKey();
    expect((await send(`${app.url}/gateway`, { key, json: {} })).status).toBe(504);
    const badStatus = await operator([
      'resolve',
      'acme',
      key,
      '--expected-attempt',
      '1',
      '--completed',
      '--http-status',
      '99',
      '--reason',
      'x',
      '--yes',
    ]);
    expect(badStatus.code).toBe(2);
    expect(badStatus.stderr).toContain('--http-status must be an HTTP status');
    const cookie = await operator([
      'resolve',
      'acme',
      key,
      '--expected-attempt',
      '1',
      '--completed',
      '--http-status',
      '201',
      '--http-header',
      'Set-Cookie: a=b',
      '--reason',
      'x',
      '--yes',
    ]);
    expect(cookie.code).toBe(2);
    expect(cookie.stderr).toContain('never replayed');
    const ok = await operator([
      'resolve',
      'acme',
      key,
      '--expected-attempt',
      '1',
      '--completed',
      '--http-status',
      '200',
      '--http-body',
      '{"ok":true}',
      '--reason',
      'INC-10',
      '--yes',
    ]);
    expect(ok.code, ok.stderr).toBe(0);
    const replay = await send(`${app.url}/gateway`, { key, json: {} });
    expect(replay.status).toBe(200);
    expect(replay.headers.get('content-type')).toMatch(/^application\/json/);
    expect(replay.json()).toEqual({ ok: true });
  });
});
