import { describe, expect, it } from 'vitest';
import { binding, uniqueKey, useClientTest } from './helpers.js';

// citusRouting on a PostgreSQL without Citus (a misconfiguration, or a cluster not yet
// distributed): the shard map cannot be read, the error is reported, and every call still runs
// through the client's own connection. Routing on a Citus cluster: test/citus/routing.test.ts.

const t = useClientTest('client_citus_routing');

describe('citusRouting without Citus', () => {
  it('reports that the shard map cannot be read and settles every call through connectionString', async () => {
    const errors: Error[] = [];
    const client = t.client({
      citusRouting: {
        nodes: { '127.0.0.1:1': 'postgresql://nobody@127.0.0.1:1/none' },
        onError: (e) => errors.push(e),
      },
    });
    for (let i = 0; i < 3; i++) {
      const key = uniqueKey('routing');
      const outcome = await client.run({ tenant: 'acme', key, request: { i }, binding }, async () => ({ i }));
      expect(outcome).toMatchObject({ outcome: 'completed', result: { i } });
      expect(await client.get({ tenant: 'acme', key, request: { i }, binding })).toMatchObject({
        status: 'completed',
        result: { i },
      });
    }
    // Read once, then not again before refreshMs (60 s): one report, not one per call.
    expect(errors).toHaveLength(1);
    expect(errors[0]?.message).toMatch(/pg_dist_shard/);
  });
});
