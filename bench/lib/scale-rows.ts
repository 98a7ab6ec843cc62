import pg from 'pg';

/**
 * Pre-existing operation records for the `scale` scenario, written as superuser straight into
 * settle_private.* with set-based INSERT ... SELECT (seconds per million rows instead of a
 * million settle.claim calls), yet holding every constraint and trigger of the engine:
 * the insert guard only admits unsettled rows, so each record is an operation whose first
 * attempt's lease lapsed (status `pending`, attempt 1, no lease), with its ended attempt
 * (`lease_expired`, which logs its acquiring claim) and its audit row (expire expired) — a state the
 * engine itself produces, reached without a single UPDATE. The guard of attempts reads each
 * attempt's operation (00004: an attempt belongs to one), in replica mode too.
 *
 * Keys are `op-<12 digits>-s`, spread evenly over the same 12-digit range as the keys the
 * pgbench scripts draw (`op-<random 12 digits>-<client>`), so new keys land between existing
 * ones in every index, and generated in ascending order so the B-trees fill sequentially.
 */
export interface ScaleRowsOptions {
  readonly rows: number;
  readonly batchRows?: number;
  readonly log?: (msg: string) => void;
}

const KEY_RANGE_START = 100_000_000_000;
const KEY_RANGE_WIDTH = 899_999_999_999;
const DEFAULT_BATCH = 1_000_000;

export async function generateScaleRows(url: string, opts: ScaleRowsOptions): Promise<void> {
  if (opts.rows <= 0) return;
  const log = opts.log ?? (() => {});
  const stride = Math.floor(KEY_RANGE_WIDTH / opts.rows);
  const batch = opts.batchRows ?? DEFAULT_BATCH;
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    for (let from = 1; from <= opts.rows; from += batch) {
      const to = Math.min(opts.rows, from + batch - 1);
      const started = Date.now();
      await client.query('begin');
      await client.query(INSERT_OPERATIONS, [from, to, KEY_RANGE_START, stride]);
      await client.query(INSERT_ATTEMPTS, [from, to, KEY_RANGE_START, stride]);
      await client.query(INSERT_AUDIT, [from, to, KEY_RANGE_START, stride]);
      await client.query('commit');
      log(`scale rows ${from}..${to} of ${opts.rows} in ${Date.now() - started} ms`);
    }
    const started = Date.now();
    await client.query('vacuum (analyze) settle_private.operations, settle_private.attempts, settle_private.audit_log');
    await client.query('checkpoint');
    log(`vacuum analyze + checkpoint in ${Date.now() - started} ms`);
  } finally {
    await client.end();
  }
}

const KEY = `'op-' || ($3::bigint + i * $4::bigint)::text || '-s'`;
const SERIES = 'generate_series($1::bigint, $2::bigint) as i';

const INSERT_OPERATIONS = `
insert into settle_private.operations
  (tenant, key, fingerprint, request, principal, scopes, binding_generation, status, attempt, attempt_token, worker,
   claimed_at, claimed_by, claim_seq, claim_audit_id, claim_status_after, max_attempts, created_at, updated_at)
select 'bench', ${KEY}, f.fingerprint, f.request, 'bench-app', array['payments.write'], 0, 'pending', 1,
       md5(i::text)::uuid, 'seed', now() - interval '1 day', session_user, 1,
       nextval('settle_private.audit_log_audit_id_seq'), 'running', 5, now() - interval '1 day', now() - interval '1 day'
  from (select r.request, settle.fingerprint(r.request) as fingerprint
          from (select jsonb_build_object('amount', 1, 'currency', 'EUR') as request) r) f,
       ${SERIES}`;

// Attempt 1's record, as the engine writes it when a lapsed lease is expired: its identity and
// claim log copied from the operation (settle_private._record_attempt), ended lease_expired.
const INSERT_ATTEMPTS = `
insert into settle_private.attempts
  (tenant, key, attempt, lease_token, worker, claimed_at, claimed_by, ended_at, end_reason, claim_seq, claim_audit_id,
   claim_status_before, claim_status_after)
select o.tenant, o.key, o.attempt, o.attempt_token, o.worker, o.claimed_at, o.claimed_by,
       o.claimed_at + interval '30 seconds', 'lease_expired', o.claim_seq, o.claim_audit_id, o.claim_status_before,
       o.claim_status_after
  from ${SERIES}
  join settle_private.operations o on o.tenant = 'bench' and o.key = ${KEY}`;

const INSERT_AUDIT = `
insert into settle_private.audit_log
  (tenant, key, seq, at, event, outcome, attempt, status_before, status_after, actor, detail)
select 'bench', ${KEY}, 2, now() - interval '1 day' + interval '30 seconds', 'expire', 'expired', 1,
       'running', 'pending', 'seed', null
  from ${SERIES}`;
