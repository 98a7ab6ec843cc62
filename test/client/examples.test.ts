import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { useTestDatabase } from '../support/database.js';

// Every example in docs/examples runs against a fresh database, and docs/client.md embeds each
// file verbatim, so the documentation cannot rot.
const dir = 'docs/examples';
const files = readdirSync(dir)
  .filter((name) => name.endsWith('.ts'))
  .sort();

const db = useTestDatabase('client_examples');
beforeAll(() => {
  vi.spyOn(console, 'log').mockImplementation(() => {});
});
afterAll(() => {
  vi.restoreAllMocks();
});

const expectations: Record<string, (value: unknown) => void> = {
  'run-once.ts': (value) =>
    expect(value).toEqual([
      expect.objectContaining({
        outcome: 'completed',
        settledBy: 'this_attempt',
        result: { chargeId: 'ch_1', amount: '19.99' },
      }),
      expect.objectContaining({ outcome: 'replay', result: { chargeId: 'ch_1', amount: '19.99' } }),
    ]),
  'reconcile.ts': (value) =>
    expect(value).toEqual([
      expect.objectContaining({ outcome: 'unknown', reason: 'effect_outcome_unknown', attempt: 1 }),
      {
        outcome: 'completed',
        result: { chargeId: 'ch_1', amountCents: 1999 },
        attempt: 2,
        settledBy: 'this_attempt',
        reconciled: true,
      },
    ]),
  'idempotent.ts': (value) =>
    expect(value).toEqual(['re_1_support', 're_1_support', 'refunds=1', 'conflict on request']),
  'claim-by-hand.ts': (value) =>
    expect(value).toEqual(['acquired', 'extended', 'settled:current_attempt', 'replay', 'completed']),
  'transactional.ts': (value) =>
    expect(value).toEqual({
      outcomes: [expect.objectContaining({ outcome: 'completed' }), expect.objectContaining({ outcome: 'replay' })],
      balance: '100.00',
    }),
  'handling-errors.ts': (value) =>
    expect(value).toEqual([
      'input: key must not contain control characters',
      'input: SE004 request.amount',
      'conflict on request',
      expect.stringMatching(/^SE010 \{"key":".*-missing","tenant":"acme"\}$/),
    ]),
};

describe('docs/examples', () => {
  it('every example has an expectation here', () => {
    expect(files).toEqual(Object.keys(expectations).sort());
  });

  it.each(files)('%s runs against a real database', async (file) => {
    const example = (await import(path.resolve(dir, file))) as { main: (databaseUrl: string) => Promise<unknown> };
    expectations[file]?.(await example.main(db.url));
  });

  it.each(files)('docs/client.md embeds %s verbatim', (file) => {
    const doc = readFileSync('docs/client.md', 'utf8');
    const source = readFileSync(path.join(dir, file), 'utf8');
    expect(doc).toContain(`<!-- example: ${dir}/${file} -->\n\`\`\`ts\n${source}\`\`\`\n<!-- /example -->`);
  });
});
