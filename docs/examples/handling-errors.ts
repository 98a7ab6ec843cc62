// Outcomes are values; exceptions are for bad input, bugs and infrastructure.
import {
  createSettleClient,
  InvalidKeyError,
  OperationNotFoundError,
  SettleConnectionError,
  SettleInputError,
} from '../../src/index.js';

export async function main(databaseUrl: string): Promise<string[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  const notes: string[] = [];
  const binding = { principal: 'user:alice', generation: 1 };
  try {
    // Bad input never reaches the database: a typed error with zod issues.
    try {
      await settle.claim({ tenant: 'acme', key: 'line1\nline2', request: {}, binding });
    } catch (error) {
      if (error instanceof InvalidKeyError) notes.push(`input: ${error.issues[0]?.message}`);
    }
    try {
      await settle.claim({ tenant: 'acme', key: 'k', request: { amount: Number.NaN }, binding });
    } catch (error) {
      if (error instanceof SettleInputError) notes.push(`input: ${error.code} ${error.issues[0]?.path.join('.')}`);
    }

    // A changed request under a used key is an outcome, not an exception.
    const key = `conflict-${Date.now()}`;
    await settle.run({ tenant: 'acme', key, request: { amount: '1.00' }, binding }, async () => 'ok');
    const changed = await settle.run({ tenant: 'acme', key, request: { amount: '2.00' }, binding }, async () => 'never');
    if (changed.outcome === 'conflict') notes.push(`conflict on ${changed.conflictOn.join(',')}`);

    // Engine errors keep their SQLSTATE and parsed DETAIL.
    const claimed = await settle.claim({ tenant: 'acme', key: `${key}-2`, request: {}, binding });
    if (claimed.outcome === 'acquired') {
      try {
        await settle.complete({ ...claimed.attempt, key: `${key}-missing` }, 'x');
      } catch (error) {
        if (error instanceof OperationNotFoundError) notes.push(`${error.sqlstate} ${JSON.stringify(error.detail)}`);
        else if (error instanceof SettleConnectionError) notes.push('database unreachable: retry later');
        else throw error;
      }
    }
    console.log(notes);
    return notes;
  } finally {
    await settle.end();
  }
}
