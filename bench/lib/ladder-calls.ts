import type { Features } from './ladder-steps.js';

/**
 * p.claim and p.complete of a ladder step: the prototype's bodies (bench/sql/prototype.sql),
 * with each feature's statements and expressions copied from settle.claim (00008) and
 * settle.complete (00010) where the cycle runs them. The paths the cycle never takes (a
 * conflict, a replay, a takeover, a refusal) keep working but are not the engine's: the
 * refusals answer or raise without the engine's audit detail, and the input rules raise
 * without the full rules' second look at non-ASCII input.
 */

/** The fingerprint of `request` as the step stores it. */
export function fingerprintOf(f: Features, request: string): string {
  if (f.fpCanonical) return `p._fingerprint(${request})`;
  const hash = `sha256(convert_to(${request}::text,'UTF8'))`;
  return f.fpText ? `'v1:' || encode(${hash}, 'hex')` : hash;
}

const fpType = (f: Features): string => (f.fpText ? 'text' : 'bytea');
const scopesStored = (f: Features): string => (f.request ? 'p._normalize_scopes(p_scopes)' : '');

/** The reservation lock of `r` differs from what the call presents. */
function lockDiffers(f: Features, fp: string): string {
  return [
    `r.fingerprint <> ${fp}`,
    'r.principal <> p_principal',
    ...(f.request ? [`r.scopes <> ${scopesStored(f)}`] : []),
    'r.binding_gen <> p_gen',
  ].join(' or ');
}

/** 00007: the login role's tenant binding; -1 when the tenant is not granted. */
const bindingRefused = (alias: string): string =>
  `exists (select 1 from p.tenant_bindings ${alias}
                            where (${alias}.role_oid = to_regrole(quote_ident(session_user::text))::oid or ${alias}.role_name = session_user::text)
                              and not (p_tenant = any (${alias}.tenants)))`;
const verdict = `case when ${bindingRefused('b')} then -1
              else coalesce((select f.below_generation from p.binding_floors f
                              where f.tenant = p_tenant and f.principal = p_principal), 0) end`;

/** A row of the log for the paths the cycle does not take (conflict, fence, duplicate). */
function logEvent(f: Features, attempt: string, kind: string): string {
  if (f.history) {
    return `insert into p.audit_log (tenant, key, seq, at, event, outcome, attempt)
      select p_tenant, p_key, coalesce(max(l.seq), 0) + 1, now(), 'complete', '${kind}', ${attempt}
        from p.audit_log l where l.tenant = p_tenant and l.key = p_key;`;
  }
  return f.tenantKey
    ? `insert into p.events (tenant, key, attempt, kind) values (p_tenant, p_key, ${attempt}, '${kind}');`
    : `insert into p.events(op_id,attempt,kind) values (r.id,${attempt},'${kind}');`;
}

const languageOf = (f: Features): string =>
  f.definer ? 'language plpgsql security definer set search_path = pg_catalog, pg_temp' : 'language plpgsql';

export function claimFunction(f: Features): string {
  const params = [
    'p_tenant text',
    'p_key text',
    'p_request jsonb',
    'p_principal text',
    ...(f.request ? ['p_scopes text[]'] : []),
    'p_gen bigint',
    "p_lease interval default '30 s'",
    'p_worker text default null',
  ];
  const out = [
    'outcome text',
    ...(f.tenantKey ? [] : ['op_id bigint']),
    'attempt int',
    'lease_token uuid',
    ...(f.fpPresented ? ['fingerprint text'] : []),
    'result jsonb',
  ];
  const answer = (outcome: string, attempt: string, token: string, result: string, fp = 'fp'): string =>
    `return query select '${outcome}', ${f.tenantKey ? '' : 'r.id, '}${attempt}, ${token}, ${
      f.fpPresented ? `${fp}, ` : ''
    }${result};`;
  const declare = [
    'r p.operations;',
    `fp ${fpType(f)} := ${fingerprintOf(f, 'p_request')};`,
    'tok uuid := gen_random_uuid();',
    ...(f.access ? ['v_seen record;'] : []),
    ...(f.history ? ['v_seq bigint;'] : []),
    ...(f.attemptLog ? ['v_before p.status;'] : []),
  ];
  const insertColumns = [
    'tenant',
    'key',
    'fingerprint',
    ...(f.request ? ['request'] : []),
    'principal',
    ...(f.request ? ['scopes'] : []),
    'binding_gen',
    ...(f.wideRow ? ['max_attempts'] : []),
    'status',
    'attempt',
    'lease_token',
    'lease_expires_at',
  ];
  const insertValues = [
    'p_tenant',
    'p_key',
    'fp',
    ...(f.request ? ['p_request'] : []),
    'p_principal',
    ...(f.request ? [scopesStored(f)] : []),
    'p_gen',
    ...(f.wideRow ? ['5'] : []),
    "'running'",
    '1',
    'tok',
    'now()+p_lease',
  ];
  // 00008: claim_seq from the key's history, claim_audit_id from audit_log's identity.
  const seqRead = f.history
    ? `select coalesce(max(l.seq), 0) + 1 into v_seq from p.audit_log l where l.tenant = p_tenant and l.key = p_key;\n    `
    : '';
  const attemptInsert = (attempt: string, before: string, after: string): string => {
    if (f.attemptLog) {
      const seq = f.history ? 'v_seq' : '1';
      const auditId = f.history ? "nextval('p.audit_log_audit_id_seq')" : '1';
      return `insert into p.attempts (tenant, key, attempt, lease_token, worker, claimed_at, claim_seq, claim_audit_id,
                            claim_status_before, claim_status_after, claimed_by)
    values (p_tenant, p_key, ${attempt}, tok, p_worker, now(), ${seq}, ${auditId}, ${before}, ${after}, session_user);`;
    }
    return f.tenantKey
      ? `insert into p.attempts (tenant, key, attempt, worker) values (p_tenant, p_key, ${attempt}, p_worker);`
      : `insert into p.attempts(op_id,attempt,worker) values (r.id,${attempt},p_worker);`;
  };
  const claimedEvent = (attempt: string): string => {
    if (f.feed) return '';
    return f.tenantKey
      ? `\n    insert into p.events (tenant, key, attempt, kind) values (p_tenant, p_key, ${attempt}, 'claimed');`
      : `\n    insert into p.events(op_id,attempt,kind) values (r.id,${attempt},'claimed');`;
  };
  const keyOf = (alias: string): string =>
    f.tenantKey ? `${alias}.tenant=p_tenant and ${alias}.key=p_key` : `${alias}.id=r.id`;

  // 00008's first statement: the access verdict and the operation row; a new key is inserted at once.
  const firstRead = f.access
    ? `  select s.verdict, s.op, s.op is null and s.verdict >= 0 and p_gen >= s.verdict as new_key
    into v_seen
    from (select ${verdict} as verdict,
                 (select o from p.operations o where o.tenant = p_tenant and o.key = p_key) as op
          offset 0) s;
`
    : '';
  // 00008's fast test of the input rules (the claim's arguments this ladder has).
  const inputRules = f.inputRules
    ? `  if (p._name_ascii_ok(p_tenant, p._limit('tenant_bytes'))
      and p._name_ascii_ok(p_key, p._limit('key_bytes'))
      and p._binding_ascii_ok(p_principal, p_scopes, p_gen)
      and p._json_ok(p_request, p._limit('request_bytes'))
      and p._lease_ok(p_lease)
      and (p_worker is null or p._name_ascii_ok(p_worker, p._limit('worker_bytes')))) is not true then
    raise exception using errcode = 'SE004', message = 'claim: an argument breaks the input rules';
  end if;
`
    : '';
  const newKey = `  insert into p.operations(${insertColumns.join(',')})
  values (${insertValues.join(',')})
  on conflict (tenant,key) do nothing returning * into r;
  if found then
    ${seqRead}${attemptInsert('1', 'null', "'running'")}${claimedEvent('1')}
    ${answer('acquired', '1', 'tok', 'null::jsonb')} return;
  end if;
`;
  const refusals = f.access
    ? `  if v_seen.verdict < 0 then
    raise exception using errcode = 'SE013', message = 'tenant not granted to this login role';
  end if;
  if p_gen < v_seen.verdict then
    ${answer('refused', 'null::int', 'null::uuid', 'null::jsonb', 'null::text')} return;
  end if;
`
    : '';
  return `create function p.claim(${params.join(', ')})
returns table(${out.join(', ')})
${languageOf(f)} as $$
declare ${declare.join(' ')}
begin
${firstRead}${inputRules}${f.access ? `  if v_seen.new_key then\n${newKey}  end if;\n` : newKey}${refusals}  select * into r from p.operations o where o.tenant=p_tenant and o.key=p_key for update;
  if ${lockDiffers(f, 'fp')} then
    ${answer('conflict', 'r.attempt', 'null::uuid', 'null::jsonb', 'null::text')} return; end if;
  if r.status = 'completed' then ${answer('replay', 'r.settled_attempt', 'null::uuid', 'r.result')} return; end if;
  if r.status = 'failed' then ${answer('failed', 'r.attempt', 'null::uuid', 'r.result')} return; end if;
  if r.status = 'running' and r.lease_expires_at > now() then ${answer('in_progress', 'r.attempt', 'null::uuid', 'null::jsonb')} return; end if;
  ${f.attemptLog ? 'v_before := r.status;\n  ' : ''}update p.operations o set attempt=o.attempt+1, lease_token=tok, lease_expires_at=now()+p_lease, status=case when o.status='pending' then 'running'::p.status else o.status end, updated_at=now()
   where ${keyOf('o')} returning * into r;
  ${seqRead}${attemptInsert('r.attempt', 'v_before', 'r.status')}${claimedEvent('r.attempt')}
  ${answer('acquired', 'r.attempt', 'tok', 'null::jsonb')}
end $$;
`;
}

export function completeFunction(f: Features): string {
  const params = [
    ...(f.tenantKey ? ['p_tenant text', 'p_key text'] : ['p_op bigint']),
    'p_attempt int',
    'p_token uuid',
    f.fpPresented ? 'p_fingerprint text' : 'p_request jsonb',
    'p_principal text',
    ...(f.request ? ['p_scopes text[]'] : []),
    'p_gen bigint',
    'p_result jsonb',
  ];
  const declare = [
    'r p.operations;',
    ...(f.fpPresented ? [] : [`fp ${fpType(f)} := ${fingerprintOf(f, 'p_request')};`]),
    ...(f.access ? ['v_seen record;'] : []),
    ...(f.history ? ['v_audit_id bigint;'] : []),
    ...(f.feed ? ['v_wake boolean;'] : []),
  ];
  const fp = f.fpPresented ? 'p_fingerprint' : 'fp';
  const opKey = (alias: string): string =>
    f.tenantKey ? `${alias}.tenant=p_tenant and ${alias}.key=p_key` : `${alias}.id=p_op`;
  const attemptKey = f.tenantKey ? 'a.tenant=p_tenant and a.key=p_key' : 'a.op_id=p_op';

  // 00010's fast test of the input rules.
  const inputRules = f.inputRules
    ? `  if (p._name_ascii_ok(p_tenant, p._limit('tenant_bytes'))
      and p._name_ascii_ok(p_key, p._limit('key_bytes'))
      and p_attempt >= 1 and p_token is not null
      and p._binding_ascii_ok(p_principal, p_scopes, p_gen)
      and p._json_ok(p_result, p._limit('result_bytes'))) is not true then
    raise exception using errcode = 'SE004', message = 'complete: an argument breaks the input rules';
  end if;
`
    : '';
  // 00010: the binding gate in the locking read (a refused login locks nothing) ...
  const gate = f.access ? ` and case when ${bindingRefused('g')} then -1 else 0 end >= 0` : '';
  // ... and after the lock the verdict with the floor, and the key's next history position.
  const afterLock = f.access
    ? `  select ${verdict} as verdict${
        f.history
          ? `,
         coalesce(greatest((select l.seq from p.audit_log l where l.tenant = p_tenant and l.key = p_key
                             order by l.seq desc limit 1),
                           max(greatest(a.claim_seq, a.settled_seq))), 0) + 1 as seq
    into v_seen
    from p.attempts a where a.tenant = p_tenant and a.key = p_key;`
          : `
    into v_seen;`
      }
  if v_seen.verdict <> 0 then
    return query select 'fenced', r.status, null::jsonb; return;
  end if;
`
    : '';
  const fence = f.leaseFence
    ? `  if r.status <> 'completed' and (r.attempt <> p_attempt or r.lease_token is distinct from p_token) then
    ${logEvent(f, 'p_attempt', 'fenced')}
    return query select 'fenced', r.status, null::jsonb; return; end if;
`
    : '';
  const observe = f.attemptLog
    ? `update p.attempts a set observation='completed', observed_at=now(), error=null, retryable=null, late_result=null,
         settled=true, settled_as=p_attempt, ended_at=coalesce(a.ended_at, now()), end_reason=coalesce(a.end_reason, 'observed'),
         settled_seq=${f.history ? 'v_seen.seq' : '2'}, settled_audit_id=${f.history ? 'v_audit_id' : '2'},
         settled_status_before=r.status, settled_reason='current_attempt', settled_by=session_user
   where ${attemptKey} and a.attempt=p_attempt and a.observation is null${f.leaseFence ? ' and a.lease_token = p_token' : ''};`
    : `update p.attempts a set outcome='succeeded', observed_at=now() where ${attemptKey} and a.attempt=p_attempt and a.outcome is null;`;
  const duplicate = `if r.status='completed' then
    ${logEvent(f, 'p_attempt', 'duplicate_success')}
    return query select 'already_completed', r.status, r.result; return; end if;`;
  const settle = `${f.history ? "v_audit_id := nextval('p.audit_log_audit_id_seq');\n  " : ''}update p.operations o set status='completed', result=p_result, settled_attempt=p_attempt, ${
    f.wideRow ? 'settled_at=now(), dead_lettered_at=null, dead_letter_reason=null, error=null, ' : ''
  }lease_token=null, lease_expires_at=null, updated_at=now() where ${opKey('o')};`;
  // 00013: the settlement's feed event, written here while no guard trigger writes it.
  const feedHere = f.feed && (!f.guardLattice || f.guardWhen);
  const completedEvent = f.feed
    ? feedHere
      ? `
  insert into p.feed_events (tenant, key, position_xid, xid, lane_hash, status, status_before, attempt, result, error,
                             dead_letter_reason, redrive_count, occurred_at)
  values (p_tenant, p_key, pg_current_xact_id(), pg_current_xact_id(), hashtext(p_key), 'completed', r.status, p_attempt,
          p_result, null, null, r.redrive_count, now())
  returning exists (select 1 from p.feed_waiters w where w.until > now()) into v_wake;
  if v_wake then
    perform pg_notify('p_feed', '');
  end if;`
      : ''
    : f.tenantKey
      ? `\n  insert into p.events (tenant, key, attempt, kind) values (p_tenant, p_key, p_attempt, 'completed');`
      : `\n  insert into p.events(op_id,attempt,kind) values (r.id,p_attempt,'completed');`;
  // The prototype observes the attempt before it looks at the status; with the attempt's log
  // columns (a settlement logged on a completed operation's attempt would be a second one) and
  // the attempts guard (its reference check reads the operation's settlement), the engine's
  // order: the operation's settlement first, then the attempt's.
  const body = f.attemptLog
    ? `  ${duplicate}
  ${settle}
  ${observe}${completedEvent}`
    : `  ${observe}
  ${duplicate}
  ${settle}${completedEvent}`;
  return `create function p.complete(${params.join(', ')})
returns table(outcome text, status p.status, result jsonb)
${languageOf(f)} as $$
declare ${declare.join(' ')}
begin
${inputRules}  select * into r from p.operations o where ${opKey('o')}${gate} for update;
${afterLock}  if ${lockDiffers(f, fp)} then
    ${logEvent(f, 'p_attempt', 'conflict')}
    return query select 'conflict', r.status, null::jsonb; return; end if;
${fence}${body}
  return query select 'settled', 'completed'::p.status, p_result;
end $$;
`;
}
