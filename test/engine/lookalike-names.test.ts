import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { useEngineDatabase } from './support/database.js';
import { sqlStateOf } from './support/errors.js';
import { newOperation } from './support/fixtures.js';
import { countOperations } from './support/inspect.js';
import { useLoginRoles } from './support/login-role.js';
import { acquire, claim, complete, get, type ClaimArgs } from './support/settle.js';

// Names that render alike are one name or refused. Leading or trailing white
// space, spaces other than U+0020 and blank patterns (U+00A0, U+3000, U+2800, ...) are refused in
// tenant, key, principal, scope and worker with the field's own SQLSTATE; scopes are accepted
// only as a one-dimensional array indexed from 1. Callers are real logins (settle_app, settle_admin).
const db = useEngineDatabase('lookalike_names');
const loginRole = useLoginRoles(db);

const LOOKALIKES: readonly [string, string][] = [
  ['trailing space', 'k '],
  ['leading space', ' k'],
  ['trailing U+3000 IDEOGRAPHIC SPACE', 'k\u3000'],
  ['trailing U+2800 BRAILLE PATTERN BLANK', 'k\u2800'],
  ['U+00A0 NO-BREAK SPACE for a space', 'a\u00a0b'],
  ['U+2007 FIGURE SPACE inside', 'a\u2007b'],
  ['U+202F NARROW NO-BREAK SPACE inside', 'a\u202fb'],
  ['U+2028 LINE SEPARATOR', 'a\u2028b'],
  ['only U+2800', '\u2800'],
  ['leading U+3000', '\u3000k'],
];

const FIELDS: readonly { field: keyof ClaimArgs; code: string; args: (v: string) => Partial<ClaimArgs> }[] = [
  { field: 'tenant', code: 'SE001', args: (v) => ({ tenant: v }) },
  { field: 'key', code: 'SE002', args: (v) => ({ key: v }) },
  { field: 'principal', code: 'SE003', args: (v) => ({ principal: v }) },
  { field: 'scopes', code: 'SE003', args: (v) => ({ scopes: [v] }) },
  { field: 'worker', code: 'SE008', args: (v) => ({ worker: v }) },
];

describe('look-alike names', () => {
  it('every field refuses each look-alike on claim with its own SQLSTATE, and stores nothing', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    const superuser = await db.connect();
    const before = await countOperations(superuser);
    for (const { field, code, args } of FIELDS) {
      for (const [what, value] of LOOKALIKES) {
        const op = newOperation('look', args(value));
        expect(await sqlStateOf(claim(app, op)), `${field}: ${what}`).toBe(code);
        // With a second, valid scope the scope check takes the loop, not the one-scope fast path.
        if (field === 'scopes')
          expect(await sqlStateOf(claim(app, { ...op, scopes: ['ok', value] })), `scopes: ${what}`).toBe(code);
      }
    }
    expect(await countOperations(superuser)).toBe(before);
    // An ASCII space inside a name is a plain character: accepted.
    for (const { field, args } of FIELDS) {
      expect((await claim(app, newOperation('look', args(`a b-${field}`)))).outcome, field).toBe('acquired');
    }
  });

  it('observations and get refuse a look-alike of the key or binding the same way (no second operation behind it)', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    const op = newOperation('obs');
    const ticket = await acquire(app, op);
    for (const [what, suffix] of [
      ['trailing space', ' '],
      ['U+3000', '\u3000'],
      ['U+2800', '\u2800'],
    ]) {
      expect(await sqlStateOf(complete(app, { ...ticket, key: `${ticket.key}${suffix}` }, { ok: 1 })), what).toBe(
        'SE002',
      );
      expect(
        await sqlStateOf(complete(app, { ...ticket, principal: `${ticket.principal ?? ''}${suffix}` }, { ok: 1 })),
        what,
      ).toBe('SE003');
      expect(await sqlStateOf(get(app, { ...op, key: `${op.key ?? ''}${suffix}` })), what).toBe('SE002');
    }
    expect((await complete(app, ticket, { ok: 1 })).outcome).toBe('settled');
  });

  it('scopes are a one-dimensional array indexed from 1: {{a}} and [0:0]={a} are refused, {a} is the set', async () => {
    const app = await (await loginRole('svc', ['settle_app'])).connect();
    const op = newOperation('dims', { scopes: ['a'] });
    expect((await claim(app, op)).outcome).toBe('acquired');
    for (const literal of ['{{a}}', '[0:0]={a}', '[2:2]={a}', '{{a,b},{c,d}}', '[0:1]={b,a}']) {
      const odd = { ...op, scopes: literal as unknown as string[] };
      expect(await sqlStateOf(claim(app, odd)), literal).toBe('SE003');
      expect(await sqlStateOf(get(app, odd)), literal).toBe('SE003');
    }
    // The plain array is the same reservation as before: in_progress, not a conflict.
    expect((await claim(app, op)).outcome).toBe('in_progress');
  });

  it('admin calls refuse look-alike tenants and principals (revoke_binding on "alice " revokes nobody: it is refused)', async () => {
    const admin: pg.Client = await (await loginRole('ops', ['settle_admin'])).connect();
    const svc = await loginRole('svc', ['settle_app']);
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding('acme', 'alice ', 2)`))).toBe('SE003');
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding('acme', U&'alice\\00A0smith', 2)`))).toBe(
      'SE003',
    );
    expect(await sqlStateOf(admin.query(`select settle.revoke_binding(U&'acme\\3000', 'alice', 2)`))).toBe('SE001');
    expect(await sqlStateOf(admin.query(`select settle.grant_tenant($1, 'acme ')`, [svc.name]))).toBe('SE001');
    expect(await sqlStateOf(admin.query(`select * from settle.redrive(' acme', 'k')`))).toBe('SE001');
    expect(await sqlStateOf(admin.query(`select * from settle.redrive('acme', U&'k\\2800')`))).toBe('SE002');
  });
});
