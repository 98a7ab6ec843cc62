import type { BindingArgs } from './history.js';

/** What the worker process claims with, so the parent can retry with the same lock. */
export const WORKER_BINDING: BindingArgs = { principal: 'worker', scopes: ['settle'], generation: '1' };
export const workerRequest = (key: string) => ({ key, amount: 4200 });

export type WorkerCommand =
  | { readonly op: 'heartbeat' | 'fail' | 'unknown' | 'exit' }
  | { readonly op: 'complete'; readonly result: unknown };
