/**
 * The ladder (issue 51): the lean prototype (bench/sql/prototype.sql, schema `p`) with the
 * engine's properties added one at a time, each step on top of the previous one, so that the
 * difference between two neighbouring steps is what one property costs. Each property is a
 * feature flag; bench/lib/ladder-render.ts writes a step's SQL and pgbench script from its flags.
 * A side step (`side`) is measured against its `base` and is not part of the chain.
 */

export const FEATURES = [
  'tenantKey',
  'request',
  'wideRow',
  'fillfactor',
  'fpText',
  'fpPresented',
  'fpCanonical',
  'idxLease',
  'idxTerminal',
  'idxAttention',
  'attemptLog',
  'leaseFence',
  'feed',
  'guardInsert',
  'guardLattice',
  'guardAttempts',
  'guardWhen',
  'access',
  'inputRules',
  'history',
  'definer',
  'rls',
] as const;
export type Feature = (typeof FEATURES)[number];
export type Features = Readonly<Record<Feature, boolean>>;

export interface LadderStep {
  /** Short id, also the label of its runs: `s0`, `s1`, `s2b`, `s7w` ... */
  readonly id: string;
  /** A few words: the property. The id's number is the step; a letter marks a sub-step (a property the issue names within another, or one it leaves out). */
  readonly title: string;
  /** What the step adds, as the engine has it (and what of it is simplified). */
  readonly adds: string;
  /** Which guarantee (or engine design choice) the step pays for. */
  readonly guarantee: string;
  /** The flag this step turns on (none for the prototype). */
  readonly feature: Feature | null;
  /** The step it is measured against: the previous one, or for a side step its base. */
  readonly base: string | null;
  readonly side: boolean;
}

interface StepSpec {
  readonly id: string;
  readonly title: string;
  readonly adds: string;
  readonly guarantee: string;
  readonly feature: Feature | null;
  /** A side step: measured against `base`, the chain goes on from the step before it. */
  readonly sideOf?: string;
}

const SPECS: readonly StepSpec[] = [
  {
    id: 's0',
    title: 'prototype',
    adds: 'the lean prototype as in perf-anchors (bench/sql/prototype.sql): surrogate id, bytea fingerprint, no stored request, one plain guard, an event row at claim and at completion',
    guarantee: 'the protocol itself: reservation, lease, one settlement, immutable result',
    feature: null,
  },
  {
    id: 's1',
    title: '(tenant, key) keys',
    adds: '(tenant, key) text keys in every table and index instead of the surrogate id; complete names the operation by (tenant, key)',
    guarantee: 'shardable by operation key (every row of an operation carries its distribution column)',
    feature: 'tenantKey',
  },
  {
    id: 's2',
    title: 'stored request and scopes',
    adds: "request jsonb and scopes text[] (normalized as a set) on the operation row; scopes join the reservation lock (claim and complete compare them, the prototype's guard keeps both immutable)",
    guarantee: 'the reservation keeps what it reserved: replay and conflict compare the request and the binding',
    feature: 'request',
  },
  {
    id: 's2b',
    title: 'the rest of the engine row',
    adds: "the engine's other operation columns (max_attempts, redrive_count, settled_at, error, dead-letter columns) in its order: columns a settlement never changes first",
    guarantee: 'attempt budget, dead letters, redrive (the row the lattice rules speak about)',
    feature: 'wideRow',
  },
  {
    id: 's2c',
    title: 'fillfactor 80',
    adds: 'operations and attempts at fillfactor 80, as in 00002',
    guarantee: 'none by itself: room on the page for updates',
    feature: 'fillfactor',
  },
  {
    id: 's3',
    title: "fingerprint as text 'v1:<hex>'",
    adds: "the fingerprint stored as text 'v1:' || hex(sha256) instead of bytea (both calls still hash the request)",
    guarantee: 'a versioned fingerprint (a new algorithm is v2, stored fingerprints keep matching)',
    feature: 'fpText',
  },
  {
    id: 's3b',
    title: 'fingerprint presented',
    adds: 'claim returns the fingerprint and complete presents it back instead of the request (one hash per cycle, as settle.complete)',
    guarantee: "the engine's protocol: an observation re-presents the reservation lock",
    feature: 'fpPresented',
  },
  {
    id: 's3c',
    title: 'canonical JSON',
    adds: "the fingerprint of the canonical JSON form (00005's _canonical_json and _fingerprint: a PL/pgSQL call per hash)",
    guarantee: 'the lock binds the intent, not its spelling (10.50 = 10.5, key order)',
    feature: 'fpCanonical',
  },
  {
    id: 's4a',
    title: 'lease-expiry index',
    adds: 'operations_by_lease_expiry_idx (lease_expires_at) where lease_token is not null',
    guarantee: 'the sweeper finds lapsed leases without a scan',
    feature: 'idxLease',
  },
  {
    id: 's4b',
    title: 'terminal-by-age index',
    adds: "operations_terminal_by_age_idx (updated_at) where status in ('failed', 'completed')",
    guarantee: 'retention and the dead-letter view find terminal records by age',
    feature: 'idxTerminal',
  },
  {
    id: 's4c',
    title: 'needing-attention index',
    adds: "operations_needing_attention_idx (status, updated_at) where status in ('pending', 'unknown', 'conflict') or dead_lettered_at is not null",
    guarantee: 'metrics and the sweeper read the operations waiting for someone, never all',
    feature: 'idxAttention',
  },
  {
    id: 's5',
    title: "the attempts' log columns",
    adds: "the engine's attempt row: its lease token, claimed_by, claim_seq, claim_audit_id, claim_status_before/after, the observation, settled, settled_as, settled_seq, settled_audit_id, settled_status_before, settled_reason, settled_by (positions fixed until 10)",
    guarantee: 'the attempt row is the audit log of the claim and of the settlement (who, when, from which status)',
    feature: 'attemptLog',
  },
  {
    id: 's5b',
    title: 'lease fence',
    adds: "complete settles only with the operation's current attempt and lease token, and the attempt row's own token (00010's fast path); the prototype's complete checks no token",
    guarantee: 'fencing: a stale or guessed token never settles',
    feature: 'leaseFence',
  },
  {
    id: 's6',
    title: 'feed event and slot index',
    adds: "one feed_events row per settlement (00013: the result's copy, position_xid, lane hash; pkey, slot index, failed-by-key index; the waiter probe) instead of the 'claimed' and 'completed' event rows",
    guarantee: 'every final outcome delivered exactly once to feed consumers, in commit-safe order',
    feature: 'feed',
  },
  {
    id: 's7a',
    title: 'insert guard',
    adds: "_100_guard_insert on operations: 00004's INSERT branch (a new operation starts unsettled; the rules on the lock's columns, the budget and the lease)",
    guarantee: 'every writer, not only the API, creates operations unsettled and well-formed',
    feature: 'guardInsert',
  },
  {
    id: 's7b',
    title: 'lattice guard',
    adds: "_100_guard_lattice replaces the prototype's guard: 00004's UPDATE branch (earlier-state test, the row rules, the failure guard) writing the feed event, as the engine; _050_guard_lock",
    guarantee: 'no writer moves a status down, changes a result or the lock, or breaks a row rule',
    feature: 'guardLattice',
  },
  {
    id: 's7c',
    title: 'attempts guard',
    adds: "_100_guard_settlement on attempts (00004: who claimed and settled is the login, the attempt's rules, the reference check reading the operation) and _050_guard_identity",
    guarantee: 'one terminal observation per attempt, one settlement per operation, for every writer',
    feature: 'guardAttempts',
  },
  {
    id: 's7w',
    title: 'guards behind WHEN',
    adds: 'the three guards with a WHEN clause true only when a rule is broken or the row is in an earlier state; the feed event back in complete (a WHEN clause cannot write it) and the attempts reference check off the common path',
    guarantee:
      "the same row rules, checked in the executor; the attempts' reference check no longer runs for rows the WHEN passes",
    feature: 'guardWhen',
    sideOf: 's7c',
  },
  {
    id: 's8',
    title: 'access verdict',
    adds: "tenant_bindings and binding_floors read in claim's first statement with the operation row (00008), and by complete: the binding gate in its locking read, the floor after the lock (00010)",
    guarantee: 'a login reaches only its tenants; a revoked binding generation runs and settles nothing',
    feature: 'access',
  },
  {
    id: 's9',
    title: 'input rules',
    adds: "the fast test of 00008 and 00010: printable-ASCII names within their limits, the binding, the request's or result's size, the lease (the full rules' slow path is not copied)",
    guarantee: 'bad input gets a typed error before anything is stored',
    feature: 'inputRules',
  },
  {
    id: 's10',
    title: 'history position',
    adds: "claim_seq and settled_seq from the key's history (max(seq) of audit_log, and of the attempts at complete) and the audit ids from audit_log's identity sequence, as 00008 and 00010",
    guarantee: 'one order of every event of a key (settle.audit_log)',
    feature: 'history',
  },
  {
    id: 's11',
    title: 'SECURITY DEFINER',
    adds: 'claim and complete SECURITY DEFINER with SET search_path = pg_catalog, pg_temp',
    guarantee: "the API runs with the owner's rights and a pinned path: callers get EXECUTE, never the tables",
    feature: 'definer',
  },
  {
    id: 's12',
    title: 'row-level security',
    adds: 'the tables and the two calls owned by a role that is not a superuser, every table with forced row-level security and an owner_only policy (00002)',
    guarantee: 'only the owner role, through the API, reaches rows',
    feature: 'rls',
  },
];

const none: Features = Object.fromEntries(FEATURES.map((f) => [f, false])) as Record<Feature, boolean>;

/** The features of every step: the chain's cumulative flags; a side step adds its own to its base's. */
export function ladderFeatures(): ReadonlyMap<string, Features> {
  const byId = new Map<string, Features>();
  let chain = none;
  for (const spec of SPECS) {
    const base = spec.sideOf === undefined ? chain : byId.get(spec.sideOf);
    if (base === undefined) throw new Error(`ladder step ${spec.id}: unknown base ${spec.sideOf}`);
    const features = spec.feature === null ? base : { ...base, [spec.feature]: true };
    byId.set(spec.id, features);
    if (spec.sideOf === undefined) chain = features;
  }
  return byId;
}

/** The steps in measuring order, each with the step it is compared with. */
export function ladderSteps(): readonly LadderStep[] {
  let previous: string | null = null;
  return SPECS.map((spec) => {
    const side = spec.sideOf !== undefined;
    const step: LadderStep = {
      id: spec.id,
      title: spec.title,
      adds: spec.adds,
      guarantee: spec.guarantee,
      feature: spec.feature,
      base: side ? (spec.sideOf ?? null) : previous,
      side,
    };
    if (!side) previous = spec.id;
    return step;
  });
}

/** The steps named in `ids` (all for undefined), in ladder order; unknown ids are an error. */
export function selectSteps(ids: readonly string[] | undefined): readonly LadderStep[] {
  const steps = ladderSteps();
  if (ids === undefined) return steps;
  const unknown = ids.filter((id) => !steps.some((s) => s.id === id));
  if (unknown.length > 0) {
    throw new Error(`unknown ladder step ${unknown.join(', ')}; expected some of ${steps.map((s) => s.id).join(', ')}`);
  }
  return steps.filter((s) => ids.includes(s.id));
}
