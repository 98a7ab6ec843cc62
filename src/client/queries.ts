import './polyfills.js';
import { sql } from 'slonik';
import * as rows from './rows.js';
import type { Binding, Json } from './types.js';

// Every statement is parameterized through slonik's `sql` tag and calls the API with named
// arguments, the way a DBA would in psql. Nothing here touches settle_private.
//
// The hot path (claim, heartbeat, complete) is written as one flat template: every nested
// fragment costs slonik a re-numbering pass, which tripled the cost of building a claim.
// JSON goes in as text cast to jsonb: parseInput has already proved it plain JSON
// (findJsonProblem), which is what sql.jsonb would re-check before the same JSON.stringify.

const jsonText = (value: Json): string => JSON.stringify(value);

const interval = (ms: number) => sql.fragment`make_interval(secs => ${ms}::float8 / 1000)`;

const bindingArgs = (binding: Binding) => sql.fragment`
  principal => ${binding.principal},
  scopes => ${sql.array(binding.scopes, 'text')},
  binding_generation => ${binding.generation.toString()}::bigint`;

export interface AttemptArgs {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly leaseToken: string;
  readonly fingerprint: string;
  readonly binding: Binding;
}

const attemptArgs = (a: AttemptArgs) => sql.fragment`
  tenant => ${a.tenant}, key => ${a.key}, attempt => ${a.attempt}::integer,
  lease_token => ${a.leaseToken}::uuid, fingerprint => ${a.fingerprint}, ${bindingArgs(a.binding)}`;

export const claimQuery = (input: {
  tenant: string;
  key: string;
  request: Json;
  binding: Binding;
  leaseMs: number;
  worker?: string | undefined;
  maxAttempts: number;
}) => sql.type(rows.claimRow)`
  select * from settle.claim(
    tenant => ${input.tenant}, key => ${input.key}, request => ${jsonText(input.request)}::jsonb,
    principal => ${input.binding.principal}, scopes => ${sql.array(input.binding.scopes, 'text')},
    binding_generation => ${input.binding.generation.toString()}::bigint,
    lease => make_interval(secs => ${input.leaseMs}::float8 / 1000), worker => ${input.worker ?? null}::text,
    max_attempts => ${input.maxAttempts}::integer)`;

export const heartbeatQuery = (a: { tenant: string; key: string; attempt: number; leaseToken: string }, leaseMs: number) =>
  sql.type(rows.heartbeatRow)`
  select * from settle.heartbeat(
    tenant => ${a.tenant}, key => ${a.key}, attempt => ${a.attempt}::integer,
    lease_token => ${a.leaseToken}::uuid, lease => make_interval(secs => ${leaseMs}::float8 / 1000))`;

export const completeQuery = (a: AttemptArgs, result: Json) => sql.type(rows.observationRow)`
  select * from settle.complete(
    tenant => ${a.tenant}, key => ${a.key}, attempt => ${a.attempt}::integer,
    lease_token => ${a.leaseToken}::uuid, fingerprint => ${a.fingerprint},
    principal => ${a.binding.principal}, scopes => ${sql.array(a.binding.scopes, 'text')},
    binding_generation => ${a.binding.generation.toString()}::bigint, result => ${jsonText(result)}::jsonb)`;

export const failQuery = (a: AttemptArgs, error: Json, retryable: boolean) => sql.type(rows.observationRow)`
  select * from settle.fail(${attemptArgs(a)}, error => ${sql.jsonb(error)}, retryable => ${retryable})`;

export const reportUnknownQuery = (a: AttemptArgs) => sql.type(rows.observationRow)`
  select * from settle.report_unknown(${attemptArgs(a)})`;

export const getQuery = (input: { tenant: string; key: string; request: Json; binding: Binding }) => sql.type(rows.getRow)`
  select * from settle.get(
    tenant => ${input.tenant}, key => ${input.key}, request => ${jsonText(input.request)}::jsonb,
    principal => ${input.binding.principal}, scopes => ${sql.array(input.binding.scopes, 'text')},
    binding_generation => ${input.binding.generation.toString()}::bigint)`;

export const inspectQuery = (tenant: string, key: string) => sql.type(rows.operationRow)`
  select * from settle.inspect(tenant => ${tenant}, key => ${key})`;

export const expireLeasesQuery = (batchSize: number) => sql.type(rows.expireRow)`
  select * from settle.expire_leases(batch_size => ${batchSize}::integer)`;

export const redriveQuery = (input: {
  tenant: string;
  key: string;
  additionalAttempts: number;
  request?: Json | undefined;
  reason?: string | undefined;
}) => sql.type(rows.operationRow)`
  select * from settle.redrive(
    tenant => ${input.tenant}, key => ${input.key},
    additional_attempts => ${input.additionalAttempts}::integer,
    request => ${input.request === undefined ? null : sql.jsonb(input.request)}::jsonb,
    reason => ${input.reason ?? null}::text)`;

export const purgeQuery = (olderThanMs: number, batchSize: number) => sql.type(rows.purgeRow)`
  select settle.purge(older_than => ${interval(olderThanMs)}, batch_size => ${batchSize}::integer) as purged`;

export const statsQuery = () => sql.type(rows.statsRow)`select * from settle.stats order by tenant`;

export const metricsQuery = () => sql.type(rows.metricsRow)`select * from settle.metrics`;

export const deadLettersQuery = (limit: number) => sql.type(rows.deadLetterRow)`
  select * from settle.dead_letters order by dead_lettered_at, tenant, key limit ${limit}::integer`;

export const attemptsQuery = (tenant: string, key: string) => sql.type(rows.attemptRow)`
  select * from settle.attempts where tenant = ${tenant} and key = ${key} order by attempt`;

export const auditLogQuery = (tenant: string, key: string) => sql.type(rows.auditRow)`
  select * from settle.audit_log where tenant = ${tenant} and key = ${key} order by seq, audit_id`;
