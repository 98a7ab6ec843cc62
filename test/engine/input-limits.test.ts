import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { countOperations, mustGetOperation } from './support/inspect.js';
import { acquire, claim, complete, type ClaimArgs } from './support/settle.js';

// Bad input gets a typed SQLSTATE and stores nothing, as settle_app.
const db = useEngineDatabase('input_limits');

const claims: { code: string; what: string; change: Partial<ClaimArgs> }[] = [
  { code: 'SE001', what: 'NULL tenant', change: { tenant: null } },
  { code: 'SE001', what: 'empty tenant', change: { tenant: '' } },
  { code: 'SE001', what: 'whitespace-only tenant', change: { tenant: ' \t ' } },
  { code: 'SE001', what: '65-byte tenant', change: { tenant: 't'.repeat(65) } },
  { code: 'SE001', what: 'tenant of 33 two-byte characters (66 bytes)', change: { tenant: 'é'.repeat(33) } },
  { code: 'SE002', what: 'NULL key', change: { key: null } },
  { code: 'SE002', what: 'empty key', change: { key: '' } },
  { code: 'SE002', what: '256-byte key', change: { key: 'k'.repeat(256) } },
  { code: 'SE002', what: 'key with a tab', change: { key: 'order\t42' } },
  { code: 'SE002', what: 'non-NFC key', change: { key: 'caf' + 'e\u0301' } },
  { code: 'SE003', what: 'NULL principal', change: { principal: null } },
  { code: 'SE003', what: 'empty principal', change: { principal: '' } },
  { code: 'SE003', what: '65 scopes', change: { scopes: Array.from({ length: 65 }, (_, i) => `s${i}`) } },
  { code: 'SE003', what: 'a NULL scope', change: { scopes: ['a', null] } },
  { code: 'SE003', what: 'NULL scopes', change: { scopes: null } },
  { code: 'SE003', what: 'negative binding generation', change: { binding_generation: -1 } },
  { code: 'SE004', what: 'request over 64 KiB', change: { request: { pad: 'x'.repeat(64 * 1024) } } },
  { code: 'SE004', what: 'NULL request', change: { request: null } },
  { code: 'SE007', what: 'lease of 0 s', change: { lease: '0 seconds' } },
  { code: 'SE007', what: 'lease of 2 days', change: { lease: '2 days' } },
  { code: 'SE008', what: 'max_attempts 0', change: { max_attempts: 0 } },
  { code: 'SE008', what: 'blank worker', change: { worker: '  ' } },
];

describe('input limits of settle.claim', () => {
  for (const { code, what, change } of claims) {
    it(`${what}: ${code}, nothing stored`, async () => {
      const [app, admin] = await Promise.all([db.app(), db.connect()]);
      const before = await countOperations(admin);
      expect(await sqlStateOf(claim(app, newOperation('limits', change)))).toBe(code);
      expect(await countOperations(admin)).toBe(before);
    });
  }

  it('the limits are inclusive: a 64-byte tenant and a 255-byte key are accepted', async () => {
    const app = await db.app();
    const row = await claim(app, newOperation('x', { tenant: 't'.repeat(64), key: 'k'.repeat(255) }));
    expect(row.outcome).toBe('acquired');
  });
});

describe('input limits of the observations', () => {
  it('result over 1 MiB: SE005, the operation stays unsettled', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('big-result'));
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    expect(await sqlStateOf(complete(app, ticket, { pad: 'x'.repeat(1024 * 1024) }))).toBe('SE005');
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
  });

  it('an observation on an unknown key: SE010, nothing stored', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('known'));
    const before = await countOperations(admin);
    expect(await sqlStateOf(complete(app, { ...ticket, key: 'no-such-key' }, { ok: true }))).toBe('SE010');
    expect(await countOperations(admin)).toBe(before);
  });

  it('a malformed fingerprint: SE004, the operation unchanged', async () => {
    const [app, admin] = await Promise.all([db.app(), db.connect()]);
    const ticket = await acquire(app, newOperation('bad-fingerprint'));
    const before = await mustGetOperation(admin, ticket.tenant, ticket.key);
    for (const fingerprint of ['v1:xyz', ticket.fingerprint.toUpperCase(), '', `${ticket.fingerprint}0`]) {
      expect(await sqlStateOf(complete(app, { ...ticket, fingerprint }, { ok: true }))).toBe('SE004');
    }
    expect((await mustGetOperation(admin, ticket.tenant, ticket.key)).row_text).toBe(before.row_text);
  });
});
