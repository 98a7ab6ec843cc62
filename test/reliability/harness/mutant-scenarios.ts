import type pg from 'pg';
import { expireLease } from '../../../src/testing/clock.js';
import type { ClaimCall } from './driver.js';
import type { BindingArgs } from './history.js';
import type { ScenarioName } from './mutants.js';
import { acquiredTicket, type RecordingDriver } from './recorder.js';

/**
 * Short, deterministic call sequences that reach one bug class each in a few calls (the random
 * workload may take long to hit some of them). Against the real engine every one of them is a
 * clean history; against the matching mutant (test/reliability/harness/mutants.ts) the checker must
 * report the mutant's expected invariants. Each scenario uses its own key under `tenant`.
 */
export interface ScenarioContext {
  readonly tenant: string;
  /** Three recorded drivers (processes) on the same engine. */
  readonly p: readonly [RecordingDriver, RecordingDriver, RecordingDriver];
  /** Superuser connection, for moving leases into the past. */
  readonly admin: pg.ClientBase;
}

const BINDING: BindingArgs = { principal: 'alice', scopes: ['pay'], generation: '1' };

type Scenario = (c: ScenarioContext, claim: (key: string) => ClaimCall) => Promise<void>;

/** Attempt 1 acquired, its lease lapsed, attempt 2 acquired by p2. */
async function superseded(c: ScenarioContext, call: ClaimCall) {
  const [p1, p2] = c.p;
  const t1 = acquiredTicket(await p1.claim(call));
  await expireLease(c.admin, c.tenant, call.key);
  const t2 = acquiredTicket(await p2.claim(call));
  return { t1, t2 };
}

const SCENARIOS: Record<ScenarioName, Scenario> = {
  // The superseded attempt's real success arrives after attempt 2 settled.
  async 'late-success'(c, claim) {
    const { t1, t2 } = await superseded(c, claim('late-success'));
    await c.p[1].complete(t2, { receipt: 'attempt-2' });
    await c.p[0].complete(t1, { receipt: 'attempt-1' });
    await c.p[2].claim(claim('late-success'));
  },
  // A forged success of the superseded attempt raises the status to conflict; the lease
  // holder then loses its response.
  async 'conflict-then-unknown'(c, claim) {
    const { t1, t2 } = await superseded(c, claim('conflict-then-unknown'));
    await c.p[0].complete({ ...t1, binding: { ...BINDING, generation: '2' } }, { receipt: 'forged' });
    await c.p[1].reportUnknown(t2);
    await c.p[2].get({
      tenant: c.tenant,
      key: 'conflict-then-unknown',
      request: { key: 'conflict-then-unknown', amount: 100 },
      binding: BINDING,
    });
  },
  // The lease holder reports a success for another request (foreign fingerprint).
  async 'forged-success'(c, claim) {
    const t = acquiredTicket(await c.p[0].claim(claim('forged-success')));
    await c.p[0].complete({ ...t, fingerprint: `v1:${'0'.repeat(64)}` }, { receipt: 'forged' });
    await c.p[1].claim(claim('forged-success'));
  },
  // After a settlement, a claim with another amount under the same key.
  async 'mismatched-claim'(c, claim) {
    const call = claim('mismatched-claim');
    const t = acquiredTicket(await c.p[0].claim(call));
    await c.p[0].complete(t, { receipt: 'settled' });
    await c.p[1].claim({ ...call, request: { key: call.key, amount: 9999 } });
  },
  // The superseded attempt reports a retryable failure and an unknown; attempt 2 settles.
  async 'stale-fail'(c, claim) {
    const { t1, t2 } = await superseded(c, claim('stale-fail'));
    await c.p[0].fail(t1, { code: 'stale' }, true);
    await c.p[0].reportUnknown(t1);
    await c.p[1].complete(t2, { receipt: 'attempt-2' });
  },
  // The seed's retry-after-failure: attempt 1 fails retryably, attempt 2 must acquire and settle.
  async 'retry-after-failure'(c, claim) {
    const call = claim('retry-after-failure');
    const t1 = acquiredTicket(await c.p[0].claim(call));
    await c.p[0].fail(t1, { code: 'upstream_unavailable' }, true);
    const r = await c.p[1].claim(call);
    if (r.type === 'ok' && r.answer.ticket !== undefined)
      await c.p[1].complete(r.answer.ticket, { receipt: 'attempt-2' });
  },
  // The superseded attempt keeps heart-beating.
  async 'stale-heartbeat'(c, claim) {
    const { t1, t2 } = await superseded(c, claim('stale-heartbeat'));
    await c.p[0].heartbeat(t1);
    await c.p[1].complete(t2, { receipt: 'attempt-2' });
  },
  // Attempt 1 lost its response (unknown), attempt 2's lease lapses, attempt 3 takes over.
  async 'takeover-after-unknown'(c, claim) {
    const call = claim('takeover-after-unknown');
    const t1 = acquiredTicket(await c.p[0].claim(call));
    await c.p[0].reportUnknown(t1);
    acquiredTicket(await c.p[1].claim(call));
    await expireLease(c.admin, c.tenant, call.key);
    const t3 = acquiredTicket(await c.p[2].claim(call));
    await c.p[2].complete(t3, { receipt: 'attempt-3' });
  },
  // A second worker claims while attempt 1's lease is live (in_progress), then attempt 1
  // heart-beats and settles.
  async 'duplicate-claim'(c, claim) {
    const call = claim('duplicate-claim');
    const t1 = acquiredTicket(await c.p[0].claim(call));
    await c.p[1].claim(call);
    await c.p[0].heartbeat(t1);
    await c.p[0].complete(t1, { receipt: 'attempt-1' });
    await c.p[1].claim(call);
  },
  // The only attempt loses its response; the budget is spent. The operation
  // must stay unknown (dead letter needs_reconciliation), never failed.
  async 'timeout-exhaustion'(c, claim) {
    const call = { ...claim('timeout-exhaustion'), maxAttempts: 1 };
    const t = acquiredTicket(await c.p[0].claim(call));
    await c.p[0].reportUnknown(t);
    await c.p[1].claim(call);
    await c.p[2].get({ tenant: c.tenant, key: 'timeout-exhaustion', request: call.request, binding: call.binding });
  },
  // The binding's scopes out of order (the engine stores them sorted): the holder settles,
  // a retry with the identical arguments replays.
  async 'reordered-scopes'(c, claim) {
    const call = { ...claim('reordered-scopes'), binding: { ...BINDING, scopes: ['refund', 'pay'] } };
    const t = acquiredTicket(await c.p[0].claim(call));
    await c.p[0].complete(t, { receipt: 'settled' });
    await c.p[1].claim(call);
  },
  // A stranger (another principal) reads a settled operation, then the holder reads it.
  async 'hostile-get'(c, claim) {
    const call = claim('hostile-get');
    const t = acquiredTicket(await c.p[0].claim(call));
    await c.p[0].complete(t, { receipt: 'secret' });
    await c.p[1].get({ ...call, binding: { ...BINDING, principal: 'mallory' } });
    await c.p[1].get({ ...call, request: { key: call.key, amount: 1 } });
    await c.p[0].get(call);
  },
  // The principal re-authenticates: generation 1 is revoked while attempt 1 runs; its success,
  // heartbeat, retry and read must all be refused.
  async 'revoked-success'(c, claim) {
    // Its own principal: the revocation must not touch the other scenarios' binding.
    const call = { ...claim('revoked-success'), binding: { ...BINDING, principal: 'alice-reauthenticated' } };
    const t = acquiredTicket(await c.p[0].claim(call));
    await c.p[2].revokeBinding(c.admin, c.tenant, call.binding.principal, 2);
    await c.p[0].heartbeat(t);
    await c.p[0].complete(t, { receipt: 'after-revocation' });
    await c.p[1].claim(call);
    await c.p[1].get(call);
  },
};

export const SCENARIO_NAMES = Object.keys(SCENARIOS) as ScenarioName[];

/** Runs one scenario; every call is recorded by the drivers of `c`. */
export async function runScenario(name: ScenarioName, c: ScenarioContext): Promise<void> {
  const claim = (key: string): ClaimCall => ({
    tenant: c.tenant,
    key,
    request: { key, amount: 100 },
    binding: BINDING,
    maxAttempts: 5,
  });
  await SCENARIOS[name](c, claim);
}
