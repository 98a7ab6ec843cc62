export { createSettleClient, type SettleClient } from './client.js';
export * from './errors.js';
export {
  createResultParserInterceptor,
  RESULT_PARSER_INTERCEPTOR,
  settleInterceptors,
  settleTypeParsers,
} from './interceptors.js';
export { findJsonProblem, jsonbTextLength } from './json.js';
export { type Classification, defaultClassify, isOutcomeUnknownError } from './classify.js';
export {
  defaultErrorToJson,
  type EarlierAttempts,
  type ResultSchema,
  type RunContext,
  type RunInput,
  type RunOptions,
  type RunOutcome,
  sameReservation,
  type UnknownReason,
  type VoidToNull,
} from './run.js';
export { idempotencyContext, type IdempotentOptions, type PerCall } from './idempotent.js';
export type {
  AcquiredItem,
  BatchItem,
  ClaimManyInput,
  IdempotentManyOptions,
  ItemReport,
  RunManyContext,
  RunManyInput,
  RunManyOptions,
} from './run-many.js';
export { LIMITS } from './schemas.js';
export {
  type EffectOutcome,
  type HttpRequestDetails,
  type HttpRequestResult,
  type HttpUnknownReason,
  type MeterProviderLike,
  METRICS,
  recordHttpRequest,
  type TelemetryOptions,
  type TracerProviderLike,
} from './telemetry.js';
export type { Isolation, TransactionEffectContext, TransactionOutcome, TransactionRunInput } from './transaction.js';
export type * from './types.js';
export {
  createReconciler,
  type HttpResolution,
  httpResultProblem,
  parseResolveInput,
  RECONCILER_METRICS,
  type ReconcileCandidate,
  type ReconcileDecision,
  type Reconciler,
  type ReconcilerOptions,
  type ReconcileResult,
  resolveOperation,
  type ResolveInput,
  type ResolveOutcome,
  storedResponseOf,
  type SweepSummary,
} from './reconcile.js';
export type { StoredResponse } from './stored-response.js';
