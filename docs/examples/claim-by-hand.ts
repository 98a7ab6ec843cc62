// The low-level calls run() is made of: claim, heartbeat, complete (or fail / reportUnknown).
import { createSettleClient } from '../../src/index.js';

export async function main(databaseUrl: string): Promise<string[]> {
  const settle = createSettleClient({ connectionString: databaseUrl });
  const seen: string[] = [];
  try {
    const input = {
      tenant: 'acme',
      key: `export-${Date.now()}`,
      request: { report: 'monthly', month: '2026-01' },
      binding: { principal: 'svc:exporter', generation: 1 },
      leaseMs: 10_000,
      worker: 'exporter-1',
    };
    const claimed = await settle.claim(input);
    seen.push(claimed.outcome); // 'acquired'
    if (claimed.outcome !== 'acquired') return seen;
    const handle = claimed.attempt; // tenant, key, attempt, leaseToken, fingerprint, binding

    const beat = await settle.heartbeat(handle, { leaseMs: 10_000 });
    seen.push(beat.outcome); // 'extended' ('fenced' means: stop, someone else owns it now)

    const settled = await settle.complete(handle, { rows: 1234, file: 's3://exports/2026-01.csv' });
    seen.push(`${settled.outcome}:${settled.reason}`); // 'settled:current_attempt'

    const again = await settle.claim(input);
    seen.push(again.outcome); // 'replay'
    const read = await settle.get(input); // lock-gated: the same request and binding as the claim
    seen.push(read.outcome === 'found' ? read.status : read.outcome); // 'completed'
    return seen;
  } finally {
    await settle.end();
  }
}
