import { type PrimitiveValueExpression, type QuerySqlToken, sql } from 'slonik';
import type { z } from 'zod';
import * as rows from './rows.js';
import type { Binding, Json } from './types.js';

// Every statement is parameterized through slonik's `sql` tag and calls the API with named
// arguments, the way a DBA would in psql. Nothing here touches settle_private.
//
// The per-operation statements (claim, heartbeat, complete, fail, report_unknown, get) have a
// fixed text: the tag writes each once, at load, and a call binds only its values (`fixed`).
// Building them per call cost the tag's walk of a ~600-character template, and gave slonik a new
// string each time (its `$slonik_N` -> `$N` rewrite, and the prepared-statement name lookup,
// then hashed it again). JSON goes in as text cast to jsonb: parseInput has already proved it
// plain JSON (findJsonProblem), which is what sql.jsonb would re-check before the same
// JSON.stringify.

const jsonText = (value: Json): string => JSON.stringify(value);

const interval = (ms: number) => sql.fragment`make_interval(secs => ${ms}::float8 / 1000)`;

/** A value of a fixed statement: what the tag binds (a text[] parameter takes the array). */
type Value = PrimitiveValueExpression | readonly string[];

/** The placeholder written in a fixed statement's template: its value is bound per call. */
const P = '';
const TEXT_ARRAY = sql.array([], 'text');

/**
 * A statement of fixed text: `template` is written once with the tag, with P (or TEXT_ARRAY) in
 * place of each value; each call gives the values in the order of the template's placeholders.
 * The text keeps PostgreSQL's `$N` placeholders, so slonik's rewrite leaves the same string.
 */
function fixed<S extends z.ZodType>(template: QuerySqlToken<S>): (values: readonly Value[]) => QuerySqlToken<S> {
  const text = template.sql.replaceAll('$slonik_', '$');
  const arity = template.values.length;
  return (values) => {
    if (values.length !== arity) throw new Error(`statement takes ${arity} values, got ${values.length}`);
    return Object.freeze({ ...template, sql: text, values: values as readonly PrimitiveValueExpression[] });
  };
}

export interface AttemptArgs {
  readonly tenant: string;
  readonly key: string;
  readonly attempt: number;
  readonly leaseToken: string;
  readonly fingerprint: string;
  readonly binding: Binding;
}

const claimStatement = fixed(sql.type(rows.claimRow)`
  select * from settle.claim(
    tenant => ${P}, key => ${P}, request => ${P}::jsonb,
    principal => ${P}, scopes => ${TEXT_ARRAY}, binding_generation => ${P}::bigint,
    lease => make_interval(secs => ${P}::float8 / 1000), worker => ${P}::text, max_attempts => ${P}::integer,
    rerun_after_unknown => ${P}::boolean)`);

export const claimQuery = (input: {
  tenant: string;
  key: string;
  request: Json;
  binding: Binding;
  leaseMs: number;
  worker?: string | undefined;
  maxAttempts: number;
  rerunAfterUnknown?: boolean;
}) =>
  claimStatement([
    input.tenant,
    input.key,
    jsonText(input.request),
    input.binding.principal,
    input.binding.scopes,
    input.binding.generation.toString(),
    input.leaseMs,
    input.worker ?? null,
    input.maxAttempts,
    input.rerunAfterUnknown ?? true,
  ]);

const heartbeatStatement = fixed(sql.type(rows.heartbeatRow)`
  select * from settle.heartbeat(
    tenant => ${P}, key => ${P}, attempt => ${P}::integer,
    lease_token => ${P}::uuid, lease => make_interval(secs => ${P}::float8 / 1000))`);

export const heartbeatQuery = (
  a: { tenant: string; key: string; attempt: number; leaseToken: string },
  leaseMs: number,
) => heartbeatStatement([a.tenant, a.key, a.attempt, a.leaseToken, leaseMs]);

// The arguments every observation takes, in this order: see attemptValues.
const completeStatement = fixed(sql.type(rows.observationRow)`
  select * from settle.complete(
    tenant => ${P}, key => ${P}, attempt => ${P}::integer, lease_token => ${P}::uuid, fingerprint => ${P},
    principal => ${P}, scopes => ${TEXT_ARRAY}, binding_generation => ${P}::bigint,
    result => ${P}::jsonb)`);

const failStatement = fixed(sql.type(rows.observationRow)`
  select * from settle.fail(
    tenant => ${P}, key => ${P}, attempt => ${P}::integer, lease_token => ${P}::uuid, fingerprint => ${P},
    principal => ${P}, scopes => ${TEXT_ARRAY}, binding_generation => ${P}::bigint,
    error => ${P}::jsonb, retryable => ${P}::boolean)`);

const reportUnknownStatement = fixed(sql.type(rows.observationRow)`
  select * from settle.report_unknown(
    tenant => ${P}, key => ${P}, attempt => ${P}::integer, lease_token => ${P}::uuid, fingerprint => ${P},
    principal => ${P}, scopes => ${TEXT_ARRAY}, binding_generation => ${P}::bigint)`);

const attemptValues = (a: AttemptArgs): Value[] => [
  a.tenant,
  a.key,
  a.attempt,
  a.leaseToken,
  a.fingerprint,
  a.binding.principal,
  a.binding.scopes,
  a.binding.generation.toString(),
];

export const completeQuery = (a: AttemptArgs, result: Json) =>
  completeStatement([...attemptValues(a), jsonText(result)]);

export const failQuery = (a: AttemptArgs, error: Json, retryable: boolean) =>
  failStatement([...attemptValues(a), jsonText(error), retryable]);

export const reportUnknownQuery = (a: AttemptArgs) => reportUnknownStatement(attemptValues(a));

const getStatement = fixed(sql.type(rows.getRow)`
  select * from settle.get(
    tenant => ${P}, key => ${P}, request => ${P}::jsonb,
    principal => ${P}, scopes => ${TEXT_ARRAY}, binding_generation => ${P}::bigint)`);

export const getQuery = (input: { tenant: string; key: string; request: Json; binding: Binding }) =>
  getStatement([
    input.tenant,
    input.key,
    jsonText(input.request),
    input.binding.principal,
    input.binding.scopes,
    input.binding.generation.toString(),
  ]);

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
