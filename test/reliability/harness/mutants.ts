import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { defaultMigrationsDir } from '../../../src/db/migrations-dir.js';
import type { Invariant } from './invariants.js';

/**
 * Deliberately broken copies of the engine: each mutant is a few exact text replacements in
 * `sql/migrations/*.sql`, applied to a copy in a temporary directory. A replacement whose
 * pattern is not found exactly once throws, so a mutant cannot silently stop mutating anything
 * when the engine changes. test/reliability/mutants.test.ts migrates a fresh database with each
 * copy and requires the history checker to report the invariants each mutant breaks.
 */
export interface Replacement {
  /** Migration file name, e.g. `00010_merge.sql`. */
  readonly file: string;
  /** Exact text that must occur exactly once in the file. */
  readonly find: string;
  readonly replace: string;
}

/** Names of the targeted scenarios in test/reliability/harness/mutant-scenarios.ts. */
export type ScenarioName =
  | 'late-success'
  | 'conflict-then-unknown'
  | 'forged-success'
  | 'mismatched-claim'
  | 'stale-fail'
  | 'retry-after-failure'
  | 'stale-heartbeat'
  | 'takeover-after-unknown'
  | 'duplicate-claim'
  | 'reordered-scopes'
  | 'hostile-get'
  | 'revoked-success'
  | 'timeout-exhaustion';

export interface Mutant {
  readonly name: string;
  /** The bug, as someone breaking the engine would have written it. */
  readonly bug: string;
  readonly replacements: readonly Replacement[];
  /** The short scenario that reaches the bug in a few calls (the random workload runs too). */
  readonly scenario: ScenarioName;
  /** Invariants the checker must report against this mutant (in the scenario's history). */
  readonly expected: readonly Invariant[];
}

const GUARDS = '00004_lattice_and_guards.sql';
const RECORDS = '00006_records.sql';
const CLAIM = '00008_claim.sql';
const LEASES = '00009_leases_and_fencing.sql';
const MERGE = '00010_merge.sql';
const READS = '00011_views_and_reads.sql';
const ACCESS = '00007_access.sql';

/** The guard that refuses downgrades and result changes, removed (trigger never created). */
const DROP_LATTICE_GUARD: readonly Replacement[] = [
  {
    file: GUARDS,
    find: `create trigger _100_guard_lattice before update on settle_private.operations
  for each row execute function settle_private.tg_operations__guard();`,
    replace: '-- mutant: lattice guard dropped',
  },
  {
    file: GUARDS,
    find: 'alter table settle_private.operations enable always trigger _100_guard_lattice;',
    replace: '',
  },
];

export const MUTANTS: readonly Mutant[] = [
  {
    name: 'last-write-wins',
    bug: 'complete on an already completed operation settles again: the later success overwrites the result (lattice guard dropped)',
    replacements: [
      {
        file: MERGE,
        find: `    if v_op.status = 'completed' then
      -- A second success: the effect ran twice.`,
        replace: `    if false then
      -- A second success: the effect ran twice.`,
      },
      ...DROP_LATTICE_GUARD,
    ],
    scenario: 'late-success',
    expected: ['single-settlement', 'acknowledged-completion-durable', 'result-immutable'],
  },
  {
    name: 'unknown-downgrades',
    bug: 'report_unknown writes status unknown whatever the status was (lattice guard dropped): a conflict drops to unknown',
    replacements: [
      {
        file: MERGE,
        find: `       set status = case when settle_private._rank(v_op.status) < settle_private._rank('unknown')
                         then 'unknown'::settle.status else v_op.status end,`,
        replace: `       set status = 'unknown'::settle.status,`,
      },
      ...DROP_LATTICE_GUARD,
    ],
    scenario: 'conflict-then-unknown',
    expected: ['status-monotonic'],
  },
  {
    name: 'no-binding-gate',
    bug: 'observations skip the lock diff: a success with another fingerprint or binding settles',
    replacements: [
      {
        file: MERGE,
        find: `  v_diff := settle_private._lock_diff(v_op, _observe.fingerprint, _observe.principal, _observe.scopes,
    _observe.binding_generation);`,
        replace: `  v_diff := '{}'::text[];`,
      },
    ],
    scenario: 'forged-success',
    expected: ['mismatch-never-settles'],
  },
  {
    name: 'no-claim-lock',
    bug: 'claim compares the stored fingerprint with itself: a different request joins the reservation instead of conflicting',
    replacements: [
      {
        file: CLAIM,
        find: 'v_diff := settle_private._lock_diff(v_op, v_fp, claim.principal,',
        replace: 'v_diff := settle_private._lock_diff(v_op, v_op.fingerprint, claim.principal,',
      },
    ],
    scenario: 'mismatched-claim',
    expected: ['mismatch-never-settles'],
  },
  {
    name: 'no-fencing',
    bug: 'fail and report_unknown of an attempt that lost the lease are merged as if it held it',
    replacements: [
      {
        file: MERGE,
        find: `  elsif not v_current then
    -- Weaker observations of an attempt that no longer holds the lease are fenced.`,
        replace: `  elsif false then
    -- Weaker observations of an attempt that no longer holds the lease are fenced.`,
      },
    ],
    scenario: 'stale-fail',
    expected: ['stale-fenced', 'superseded-no-effect'],
  },
  {
    name: 'failure-is-terminal',
    bug: 'the retry-after-failure bug of the seed: a retryable failure ends the operation, so attempt 2 can never acquire',
    replacements: [
      {
        file: MERGE,
        find: 'v_exhausted := not _observe.retryable or v_op.attempt >= v_op.max_attempts;',
        replace: 'v_exhausted := true;',
      },
    ],
    scenario: 'retry-after-failure',
    expected: ['retryable-failure-reopens'],
  },
  {
    name: 'stale-heartbeat',
    bug: 'heartbeat extends the lease for any attempt up to the current one, superseded attempts included',
    replacements: [
      {
        file: LEASES,
        find: 'if v_op.lease_token is not null and v_op.attempt = heartbeat.attempt and v_op.lease_token = heartbeat.lease_token then',
        replace: 'if v_op.lease_token is not null and v_op.attempt >= heartbeat.attempt then',
      },
    ],
    scenario: 'stale-heartbeat',
    expected: ['stale-fenced'],
  },
  {
    name: 'rescuer-downgrades',
    bug: "River's rescuer bug: ending a lapsed lease resets the status to pending, also from unknown or conflict (lattice guard dropped)",
    replacements: [
      {
        file: RECORDS,
        find: `set status = case when op.status = 'running' then 'pending'::settle.status else op.status end,`,
        replace: `set status = 'pending'::settle.status,`,
      },
      ...DROP_LATTICE_GUARD,
    ],
    scenario: 'takeover-after-unknown',
    expected: ['status-monotonic'],
  },
  {
    name: 'lease-steal',
    bug: "claim's live-lease test has its comparison flipped: a claim on a live lease ends it and takes over (a lapsed one answers in_progress)",
    replacements: [
      {
        file: CLAIM,
        find: "if v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at > v_now then",
        replace: "if v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at < v_now then",
      },
      {
        // The same test where the stored reservation's read-only answers are decided before the
        // input rules.
        file: CLAIM,
        find: "(v_op.status = 'completed' or (v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at > v_now))",
        replace:
          "(v_op.status = 'completed' or (v_op.status <> 'failed' and v_op.lease_token is not null and v_op.lease_expires_at < v_now))",
      },
    ],
    scenario: 'duplicate-claim',
    expected: ['lease-exclusive'],
  },
  {
    name: 'unsorted-scopes',
    bug: 'the lock diff compares the presented scopes as given, not normalized like the stored ones: the same scopes in another order conflict, at claim and at every observation',
    replacements: [
      {
        file: RECORDS,
        find: "case when op.scopes is distinct from settle_private._normalize_scopes(_lock_diff.scopes) then 'scopes' end,",
        replace: "case when op.scopes is distinct from _lock_diff.scopes then 'scopes' end,",
      },
      {
        // The same comparison where the common answers are decided without _lock_diff: the
        // replay of settle.claim and the settling success of settle.complete.
        file: CLAIM,
        find: 'and v_op.scopes = settle_private._normalize_scopes(claim.scopes)',
        replace: 'and v_op.scopes = claim.scopes',
      },
      {
        file: MERGE,
        find: 'and o.scopes = settle_private._normalize_scopes(complete.scopes)',
        replace: 'and o.scopes = complete.scopes',
      },
    ],
    scenario: 'reordered-scopes',
    expected: ['spurious-conflict'],
  },
  {
    name: 'get-skips-lock',
    bug: 'settle.get answers the canonical state to any caller who knows the key: the lock check of the read is skipped',
    replacements: [
      {
        file: READS,
        find: `  elsif cardinality(v_diff) > 0 then
    perform settle_private._audit(get.tenant`,
        replace: `  elsif false then
    perform settle_private._audit(get.tenant`,
      },
    ],
    scenario: 'hostile-get',
    expected: ['read-gated-by-lock'],
  },
  {
    name: 'ignore-revocation',
    bug: 'settle.revoke_binding records a floor that nothing reads: a revoked generation still heartbeats, settles, replays and reads',
    replacements: [
      {
        file: ACCESS,
        find: `              else coalesce((select f.below_generation from settle_private.binding_floors f
                              where f.tenant = _access.tenant and f.principal = _access.principal), 0) end`,
        replace: `              else 0 end`,
      },
      {
        file: CLAIM,
        find: `                      else coalesce((select f.below_generation from settle_private.binding_floors f
                                      where f.tenant = claim.tenant and f.principal = claim.principal), 0) end as verdict,`,
        replace: `                      else 0 end as verdict,`,
      },
      {
        file: MERGE,
        find: `              else coalesce((select f.below_generation from settle_private.binding_floors f
                              where f.tenant = _observe.tenant and f.principal = _observe.principal), 0) end as verdict,`,
        replace: `              else 0 end as verdict,`,
      },
      {
        // settle.complete's settling success reads the same verdict under the row lock.
        file: MERGE,
        find: `                    else coalesce((select f.below_generation from settle_private.binding_floors f
                                    where f.tenant = complete.tenant and f.principal = complete.principal), 0) end as verdict,`,
        replace: `                    else 0 end as verdict,`,
      },
      {
        file: ACCESS,
        find: `  return coalesce((select f.below_generation from settle_private.binding_floors f
                    where f.tenant = _floor.tenant and f.principal = _floor.principal), 0);`,
        replace: `  return 0;`,
      },
    ],
    scenario: 'revoked-success',
    expected: ['revoked-never-settles'],
  },
  {
    name: 'exhaustion-fails',
    bug: 'a spent attempt budget always ends failed, also when an attempt reported unknown or lost its lease (an engine without the may-have-taken-effect rule): timeout becomes failure',
    replacements: [
      {
        file: RECORDS,
        find: '  if settle_private._may_have_taken_effect(op.tenant, op.key, op.status, op.attempt) then',
        replace: '  if false then',
      },
      {
        file: RECORDS,
        find: "dead_letter_reason = 'attempts_exhausted', error = _dead_letter.error, updated_at = as_of",
        replace: `dead_letter_reason = 'attempts_exhausted', error = coalesce(_dead_letter.error, '{"code": "attempts_exhausted"}'), updated_at = as_of`,
      },
      {
        file: GUARDS,
        find: `    if settle_private._may_have_taken_effect(new.tenant, new.key, old.status, old.attempt)
       and not settle_private._resolving_failed(new.tenant, new.key) then`,
        replace: '    if false then',
      },
    ],
    scenario: 'timeout-exhaustion',
    expected: ['timeout-stays-unknown'],
  },
];

/** `text` with `r.find` replaced; throws unless it occurs exactly once. */
export function applyReplacement(text: string, r: Replacement): string {
  const first = text.indexOf(r.find);
  const count = first < 0 ? 0 : text.split(r.find).length - 1;
  if (count !== 1) {
    throw new Error(
      `mutant replacement in ${r.file} matched ${count} times (expected exactly 1): ${JSON.stringify(r.find.slice(0, 120))}`,
    );
  }
  return text.slice(0, first) + r.replace + text.slice(first + r.find.length);
}

export interface MutatedMigrations {
  /** Directory holding the (mutated) copy of every migration file. */
  readonly dir: string;
  remove(): Promise<void>;
}

/**
 * Copies every migration of `sourceDir` into a new temporary directory, applying the
 * replacements of `mutant` (none: an exact copy, the control). Throws if a replacement names a
 * missing file or does not match exactly once.
 */
export async function writeMutatedMigrations(
  mutant: Pick<Mutant, 'name' | 'replacements'> | undefined,
  sourceDir = defaultMigrationsDir(),
): Promise<MutatedMigrations> {
  const files = (await readdir(sourceDir)).filter((f) => f.endsWith('.sql')).sort();
  const replacements = mutant?.replacements ?? [];
  for (const r of replacements) {
    if (!files.includes(r.file)) throw new Error(`mutant ${mutant?.name}: no migration file ${r.file} in ${sourceDir}`);
  }
  const dir = await mkdtemp(path.join(tmpdir(), `pg-settle-mutant-${mutant?.name ?? 'control'}-`));
  try {
    for (const file of files) {
      let text = await readFile(path.join(sourceDir, file), 'utf8');
      for (const r of replacements.filter((x) => x.file === file)) text = applyReplacement(text, r);
      await writeFile(path.join(dir, file), text);
    }
  } catch (error) {
    await rm(dir, { recursive: true, force: true });
    throw error;
  }
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}
