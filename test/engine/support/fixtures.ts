import type { ClaimArgs } from './settle.js';
import { uniqueKey } from './database.js';

export const TENANT = 'acme';

/** Claim arguments for a fresh key: one request, one binding (principal, scopes, generation 1). */
export function newOperation(prefix: string, overrides: Partial<ClaimArgs> = {}): ClaimArgs {
  return {
    tenant: TENANT,
    key: uniqueKey(prefix),
    request: { amount: '10.00', currency: 'EUR', to: 'acct-42' },
    principal: 'svc-payments',
    scopes: ['payments:write'],
    binding_generation: 1,
    lease: '30 seconds',
    worker: 'worker-1',
    ...overrides,
  };
}
