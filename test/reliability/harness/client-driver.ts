import type { SettleClient } from '../../../src/client/client.js';
import type { AttemptHandle, Json, Observation } from '../../../src/client/types.js';
import type { ClaimAnswer, SettleDriver, Ticket } from './driver.js';
import type { Answer, BindingArgs } from './history.js';

function handleOf(t: Ticket): AttemptHandle {
  return {
    tenant: t.tenant,
    key: t.key,
    attempt: t.attempt,
    leaseToken: t.leaseToken,
    // The engine judges leases; the handle's copy of the expiry is informational.
    leaseExpiresAt: new Date(0),
    fingerprint: t.fingerprint,
    binding: { principal: t.binding.principal, scopes: t.binding.scopes, generation: BigInt(t.binding.generation) },
  };
}

function bindingOf(b: BindingArgs) {
  return { principal: b.principal, scopes: b.scopes, generation: BigInt(b.generation) };
}

function observationAnswer(o: Observation): Answer {
  if (o.outcome === 'conflict') return { outcome: o.outcome, reason: o.reason, conflictOn: o.conflictOn };
  if (o.outcome === 'fenced' && (o.reason === 'invalid_token' || o.reason === 'binding_revoked'))
    return { outcome: o.outcome, reason: o.reason };
  const state = o as Extract<Observation, { status: unknown }>;
  return {
    outcome: state.outcome,
    reason: state.reason,
    status: state.status,
    attempt: state.attempt,
    settledAttempt: state.settledAttempt,
    result: state.result,
    error: state.error,
  };
}

/** The settle API through the typed client (src/client), answers normalized for the history. */
export function createClientDriver(client: SettleClient): SettleDriver {
  return {
    async claim(call): Promise<ClaimAnswer> {
      const o = await client.claim({
        tenant: call.tenant,
        key: call.key,
        request: call.request as Json,
        binding: bindingOf(call.binding),
        ...(call.leaseMs === undefined ? {} : { leaseMs: call.leaseMs }),
        ...(call.maxAttempts === undefined ? {} : { maxAttempts: call.maxAttempts }),
        ...(call.worker === undefined ? {} : { worker: call.worker }),
      });
      switch (o.outcome) {
        case 'acquired': {
          const h = o.attempt;
          const ticket: Ticket = {
            tenant: h.tenant,
            key: h.key,
            attempt: h.attempt,
            leaseToken: h.leaseToken,
            fingerprint: h.fingerprint,
            binding: call.binding,
          };
          return {
            outcome: o.outcome,
            status: o.status,
            attempt: h.attempt,
            fingerprint: h.fingerprint,
            leaseToken: h.leaseToken,
            ticket,
          };
        }
        case 'in_progress':
          return { outcome: o.outcome, status: o.status, attempt: o.attempt };
        case 'replay':
          return {
            outcome: o.outcome,
            status: 'completed',
            result: o.result,
            settledAttempt: o.settledAttempt,
            attempt: o.attempt,
          };
        case 'failed':
          return { outcome: o.outcome, error: o.error, deadLettered: o.deadLettered, attempt: o.attempt };
        case 'unknown':
        case 'in_doubt':
          return { outcome: o.outcome, status: o.status, deadLettered: o.deadLettered, attempt: o.attempt };
        case 'conflict':
          return { outcome: o.outcome, conflictOn: o.conflictOn };
        case 'refused':
          return { outcome: o.outcome, reason: o.reason };
      }
    },
    async heartbeat(t, leaseMs) {
      const o = await client.heartbeat(handleOf(t), leaseMs === undefined ? {} : { leaseMs });
      return o.outcome === 'extended'
        ? { outcome: o.outcome, status: o.status }
        : { outcome: o.outcome, reason: o.reason, status: o.status };
    },
    complete: async (t, result) => observationAnswer(await client.complete(handleOf(t), result as Json)),
    fail: async (t, error, retryable) =>
      observationAnswer(await client.fail(handleOf(t), error as Json, { retryable })),
    reportUnknown: async (t) => observationAnswer(await client.reportUnknown(handleOf(t))),
    async get(call) {
      const r = await client.get({
        tenant: call.tenant,
        key: call.key,
        request: call.request as Json,
        binding: bindingOf(call.binding),
      });
      switch (r.outcome) {
        case 'found':
          return {
            outcome: r.outcome,
            reason: r.reason,
            status: r.status,
            attempt: r.attempt,
            settledAttempt: r.settledAttempt,
            result: r.result,
            error: r.error,
            deadLettered: r.deadLettered,
          };
        case 'conflict':
          return { outcome: r.outcome, conflictOn: r.conflictOn };
        case 'refused':
          return { outcome: r.outcome, reason: r.reason };
        case 'not_found':
          return { outcome: r.outcome };
      }
    },
    end: () => client.end(),
  };
}
