-- 00003: input rules: the limits, and the checks every argument passes before it is stored.
--
-- Why: every API function validates its arguments the same way, so the rules live here once:
--   * the limits, in one immutable function (settle_private._limits) that the TypeScript
--     client's LIMITS is tested against (test/engine/limits.test.ts). A limit named
--     with a literal, settle_private._limit('key_bytes'), is folded to a constant when the
--     calling expression is planned: it costs nothing per call;
--   * fast-path predicates (_name_ok, _json_ok, _binding_ok, _lease_ok) that are inlinable
--     SQL, so the API functions evaluate them as plain expressions;
--   * slow-path checks (_check_*), run only when a fast path failed, that raise the precise
--     typed error (SQLSTATE class SE, registry in docs/errors.md).

set local role settle_owner;

-- ---------------------------------------------------------------------------------------
-- Limits
-- ---------------------------------------------------------------------------------------

-- The engine's input limits, the one place they are written. Byte limits count UTF-8 bytes
-- (of the JSON text for jsonb values). evidence_bytes bounds what the audit log keeps of a
-- refused or fenced call's presented values, payload, principal and scopes together (larger
-- ones are kept as sizes and SHA-256, 00007 _presented); refusal_rows is how many refused,
-- fenced or conflicting audit rows one key keeps in full (the rest are counted, 00006 _audit);
-- max_batch_keys bounds the keys of one batch call (settle.claim_many, complete_many: 00016),
-- max_batch_bytes the JSON text of its requests or results together.
-- Changing one is a change of the public contract:
-- src/client's LIMITS is tested against it.
create function settle_private._limits()
returns jsonb
language sql
immutable
parallel safe
as $$
  select '{
    "tenant_bytes": 64,
    "key_bytes": 255,
    "principal_bytes": 255,
    "scope_bytes": 128,
    "max_scopes": 64,
    "worker_bytes": 128,
    "reason_bytes": 1024,
    "request_bytes": 65536,
    "result_bytes": 1048576,
    "error_bytes": 65536,
    "min_lease_ms": 1000,
    "max_lease_ms": 86400000,
    "max_attempts": 1000,
    "max_batch_size": 100000,
    "max_batch_keys": 1000,
    "max_batch_bytes": 16777216,
    "evidence_bytes": 8192,
    "refusal_rows": 20
  }'::jsonb
$$;

-- One limit by name. Inlined and constant-folded when called with a literal name. An unknown
-- name yields NULL: test/engine/limits.test.ts requires every name used in sql/migrations to
-- exist.
create function settle_private._limit(name text)
returns integer
language sql
immutable
parallel safe
as $$
  select (settle_private._limits() ->> name)::integer
$$;

-- ---------------------------------------------------------------------------------------
-- Raising typed errors
-- ---------------------------------------------------------------------------------------

create function settle_private._raise(code text, message text, detail jsonb, hint text default null)
returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  raise exception using errcode = _raise.code, message = _raise.message,
    detail = coalesce(_raise.detail::text, ''), hint = coalesce(_raise.hint, '');
end
$$;

-- ---------------------------------------------------------------------------------------
-- Fast-path predicates: inlinable SQL, evaluated as plain expressions (no query per check).
-- Only when one fails do the _check_* functions below run, to raise the precise error.
-- ---------------------------------------------------------------------------------------

-- Blank means made only of white space or invisible formatting characters, named explicitly
-- so the answer does not depend on the database locale ([[:space:]] follows glibc, which
-- does not count U+00A0 NO-BREAK SPACE as space).
create function settle_private._is_blank(value text)
returns boolean
language sql
immutable
parallel safe
as $$
  select value ~ '^[[:space:]\u0085\u00a0\u1680\u180e\u2000-\u200d\u2028\u2029\u202f\u205f\u2060\u3000\ufeff]*$'
$$;

-- The code points no name may contain: Unicode 15 Default_Ignorable_Code_Point, which holds
-- every Bidi_Control code point. They render as nothing (or reorder the text around them), so
-- two keys that differ only by one of them would look identical. The set is listed in
-- docs/sql-api.md ("Input limits"); inlined and folded to a constant where it is used.
create function settle_private._invisible()
returns text
language sql
immutable
parallel safe
as $$
  select '\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff'::text
$$;

-- The code points that render as a space or as nothing visible without being default-ignorable:
-- the Unicode space separators other than U+0020 (Zs: U+00A0 NO-BREAK SPACE, U+1680,
-- U+2000-U+200A, U+202F, U+205F, U+3000 IDEOGRAPHIC SPACE), the line and paragraph separators
-- (U+2028, U+2029) and U+2800 BRAILLE PATTERN BLANK. No name may contain one anywhere:
-- 'k' and 'k' + U+3000, or 'a b' and 'a' + U+00A0 + 'b', would be two operations, two
-- principals, that render the same. (The Hangul fillers U+115F, U+1160, U+3164, U+FFA0 are in
-- _invisible.) Listed in docs/sql-api.md ("Input limits").
create function settle_private._lookalike_spaces()
returns text
language sql
immutable
parallel safe
as $$
  select '\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u2800\u3000'::text
$$;

-- A name that is not printable ASCII: no control, default-ignorable, bidi-control or
-- look-alike space character, no white space at either end, not blank, NFC. PL/pgSQL, so that its expression is set up only when a name
-- needs it (_name_ok's fast path decides every printable ASCII name without it).
create function settle_private._name_ok_unicode(value text)
returns boolean
language plpgsql
immutable
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  return value !~ ('[[:cntrl:]' || settle_private._invisible() || settle_private._lookalike_spaces() || ']')
     and value !~ '^[[:space:]]|[[:space:]]$'
     and not settle_private._is_blank(value)
     and value is nfc normalized;
end
$$;

-- Printable ASCII that begins and ends with a non-space character passes every rule at once
-- (no control, invisible or look-alike space character, no white space at either end, not
-- blank, already NFC): _name_ascii_ok. Built-in functions only, so that the hot paths test it
-- alone first (every function in an expression is looked up and permission-checked
-- when the expression is set up, in every transaction, a PL/pgSQL one the most; the fallback of
-- _name_ok is set up only when a name is not printable ASCII).
create function settle_private._name_ascii_ok(value text, max_bytes integer)
returns boolean
language sql
immutable
parallel safe
as $$
  select octet_length(value) <= max_bytes and value ~ '^[!-~]([ -~]*[!-~])?$'
$$;

-- Any other name is checked in full.
create function settle_private._name_ok(value text, max_bytes integer)
returns boolean
language sql
immutable
parallel safe
as $$
  select settle_private._name_ascii_ok(value, max_bytes)
      or (octet_length(value) <= max_bytes and settle_private._name_ok_unicode(value))
$$;

-- The limit is on the JSON text, but a value whose binary form is 8 times the limit (far
-- beyond any jsonb-to-text ratio) is refused without rendering it: a 250 MiB request must
-- not cost gigabytes of backend memory just to be measured. STABLE, not IMMUTABLE, because
-- pg_column_size is: the planner inlines a SQL function only when its body is no more
-- volatile than declared, and a call it cannot inline is parsed and planned again in every
-- transaction (fmgr_sql): about 60 us per claim or complete (pg_stat_user_functions, perf).
create function settle_private._json_ok(value jsonb, max_bytes integer)
returns boolean
language sql
stable
parallel safe
as $$
  select case when pg_column_size(value) > 8 * max_bytes then false
              else octet_length(value::text) <= max_bytes end
$$;

-- The bytes of the JSON text of `value` as _json_ok measures them, or NULL when _json_ok refuses
-- it unmeasured (its binary form is 8 times max_bytes): the batches measure each element once,
-- for its own limit and for the batch's (00016).
create function settle_private._json_bytes(value jsonb, max_bytes integer)
returns integer
language sql
stable
parallel safe
as $$
  select case when pg_column_size(value) > 8 * max_bytes then null else octet_length(value::text) end
$$;

create function settle_private._scopes_ok(scopes text[])
returns boolean
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
declare
  v_scope text;
begin
  foreach v_scope in array scopes loop
    if settle_private._name_ok(v_scope, settle_private._limit('scope_bytes')) is not true then
      return false;
    end if;
  end loop;
  return true;
end
$$;

create function settle_private._binding_ok(principal text, scopes text[], binding_generation bigint)
returns boolean
language sql
immutable
parallel safe
as $$
  select settle_private._name_ok(principal, settle_private._limit('principal_bytes'))
     and binding_generation >= 0
     and scopes is not null
     and cardinality(scopes) <= settle_private._limit('max_scopes')
     and (cardinality(scopes) = 0
          or (array_ndims(scopes) = 1 and array_lower(scopes, 1) = 1
              -- One printable ASCII scope (the usual case) passes without the loop of _scopes_ok.
              and ((cardinality(scopes) = 1 and octet_length(scopes[1]) <= settle_private._limit('scope_bytes')
                    and scopes[1] ~ '^[!-~]([ -~]*[!-~])?$')
                   or settle_private._scopes_ok(scopes))))
$$;

-- The usual binding, decided with built-in functions only (see _name_ascii_ok): a printable
-- ASCII principal and no scope or one printable ASCII scope (`scopes = array[scopes[1]]`: a
-- one-dimensional array of one element with lower bound 1). It implies _binding_ok; any other
-- binding is judged by _binding_ok.
create function settle_private._binding_ascii_ok(principal text, scopes text[], binding_generation bigint)
returns boolean
language sql
immutable
parallel safe
as $$
  select settle_private._name_ascii_ok(principal, settle_private._limit('principal_bytes'))
     and binding_generation >= 0
     and (scopes = '{}'::text[]
          or (scopes = array[scopes[1]] and settle_private._name_ascii_ok(scopes[1], settle_private._limit('scope_bytes'))))
$$;

-- A lease (claim, heartbeat) between min_lease_ms and max_lease_ms.
-- An interval is an exact duration when it has no month or year part: then a day is 24 hours
-- in every comparison and (through _expiry) in every sum. '-12 mon +361 days' compares as one
-- day (30-day months) yet, added to a timestamp, lands about four days in the past.
create function settle_private._exact(d interval)
returns boolean
language sql
immutable
parallel safe
as $$
  select date_part('month', d) = 0 and date_part('year', d) = 0
$$;

-- `at` plus an exact duration, in UTC: '1 day' is 86 400 seconds whatever the session time
-- zone and whether or not its clocks change that day (timestamptz + interval adds calendar
-- days in the session time zone).
create function settle_private._expiry(at timestamptz, d interval)
returns timestamptz
language sql
immutable
parallel safe
as $$
  select (at at time zone 'UTC' + d) at time zone 'UTC'
$$;

create function settle_private._lease_ok(lease interval)
returns boolean
language sql
immutable
parallel safe
as $$
  select settle_private._exact(lease)
     and lease between settle_private._limit('min_lease_ms') * interval '1 millisecond'
                   and settle_private._limit('max_lease_ms') * interval '1 millisecond'
$$;

-- ---------------------------------------------------------------------------------------
-- Slow-path checks: each raises the precise typed error for the first bad argument.
-- ---------------------------------------------------------------------------------------

-- A tenant, key, principal, scope or worker name: present, not blank, within its byte
-- limit, no control characters, no white space at either end, no look-alike space or blank
-- pattern, no default-ignorable code point, Unicode NFC (so visually identical keys are identical).
create function settle_private._check_name(value text, field text, max_bytes integer, code text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_problem text;
begin
  if value is null then
    v_problem := 'must not be null';
  elsif settle_private._is_blank(value) then
    v_problem := 'must not be empty or whitespace only';
  elsif octet_length(value) > max_bytes then
    v_problem := format('must be at most %s bytes (got %s)', max_bytes, octet_length(value));
  elsif value ~ '[[:cntrl:]]' then
    v_problem := 'must not contain control characters';
  elsif value ~ '^[[:space:]]|[[:space:]]$' then
    v_problem := 'must not begin or end with white space';
  elsif value ~ ('[' || settle_private._lookalike_spaces() || ']') then
    v_problem := format('must not contain a space other than U+0020 or a blank pattern (found U+%s)',
      upper(lpad(to_hex(ascii(substring(value from '[' || settle_private._lookalike_spaces() || ']'))), 4, '0')));
  elsif value ~ ('[' || settle_private._invisible() || ']') then
    v_problem := format('must not contain default-ignorable or bidirectional-control code points (found U+%s)',
      upper(lpad(to_hex(ascii(substring(value from '[' || settle_private._invisible() || ']'))), 4, '0')));
  elsif not value is nfc normalized then
    v_problem := 'must be in Unicode normalization form NFC';
  end if;
  if v_problem is not null then
    perform settle_private._raise(code, format('%s %s', field, v_problem),
      jsonb_build_object('field', field, 'max_bytes', max_bytes),
      'See the input limits in docs/sql-api.md.');
  end if;
end
$$;

-- The operation key of every call: tenant (SE001) and key (SE002).
create function settle_private._check_operation_key(tenant text, key text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_name(tenant, 'tenant', settle_private._limit('tenant_bytes'), 'SE001');
  perform settle_private._check_name(key, 'key', settle_private._limit('key_bytes'), 'SE002');
end
$$;

create function settle_private._check_json(value jsonb, field text, max_bytes integer, code text)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if value is null then
    perform settle_private._raise(code, format('%s must not be null', field),
      jsonb_build_object('field', field), 'Pass a JSON value (JSON null is ''null''::jsonb).');
  elsif not settle_private._json_ok(value, max_bytes) then
    perform settle_private._raise(code, format('%s must be at most %s bytes of JSON text', field, max_bytes),
      jsonb_build_object('field', field, 'max_bytes', max_bytes),
      'Store large payloads elsewhere and settle a reference to them.');
  end if;
end
$$;

create function settle_private._check_binding(principal text, scopes text[], binding_generation bigint)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
declare
  v_scope text;
  v_max_scopes integer := settle_private._limit('max_scopes');
begin
  perform settle_private._check_name(principal, 'principal', settle_private._limit('principal_bytes'), 'SE003');
  -- Scopes are a set of names: a one-dimensional array indexed from 1 ('{{a}}' or '[0:0]={a}'
  -- would compare unequal to '{a}' as arrays; refused rather than flattened).
  if scopes is not null and cardinality(scopes) > 0 and (array_ndims(scopes) <> 1 or array_lower(scopes, 1) <> 1) then
    perform settle_private._raise('SE003', 'scopes must be a one-dimensional array indexed from 1',
      jsonb_build_object('field', 'scopes', 'dimensions', array_ndims(scopes), 'lower_bound', array_lower(scopes, 1)),
      'Pass a plain array such as ''{payments:write}''.');
  end if;
  if scopes is null or cardinality(scopes) > v_max_scopes or array_position(scopes, null) is not null then
    perform settle_private._raise('SE003', format('scopes must be a non-null array of at most %s non-null scopes', v_max_scopes),
      jsonb_build_object('field', 'scopes', 'max_items', v_max_scopes), 'Pass ''{}'' for no scopes.');
  end if;
  foreach v_scope in array scopes loop
    perform settle_private._check_name(v_scope, 'scope', settle_private._limit('scope_bytes'), 'SE003');
  end loop;
  if binding_generation is null or binding_generation < 0 then
    perform settle_private._raise('SE003', 'binding_generation must be a non-negative integer',
      jsonb_build_object('field', 'binding_generation'),
      'Use your token epoch, session version or delegation revision.');
  end if;
end
$$;

create function settle_private._check_lease(lease interval)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if settle_private._lease_ok(lease) is not true then
    perform settle_private._raise('SE007', 'lease must be an exact duration (no month or year part) between 1 second and 1 day',
      jsonb_build_object('field', 'lease', 'min_ms', settle_private._limit('min_lease_ms'),
                         'max_ms', settle_private._limit('max_lease_ms')),
      'Renew long work with settle.heartbeat instead of a long lease.');
  end if;
end
$$;

-- An integer argument within 1..max (batch_size, max_attempts, additional_attempts): SE008.
create function settle_private._check_count(value integer, field text, max integer)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  if value is null or value not between 1 and max then
    perform settle_private._raise('SE008', format('%s must be between 1 and %s', field, max),
      jsonb_build_object('field', field), null);
  end if;
end
$$;

create function settle_private._check_observation_args(tenant text, key text, attempt integer, lease_token uuid)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_operation_key(tenant, key);
  if attempt is null or attempt < 1 then
    perform settle_private._raise('SE008', 'attempt must be a positive attempt epoch',
      jsonb_build_object('field', 'attempt'), 'Pass the attempt returned by settle.claim.');
  end if;
  if lease_token is null then
    perform settle_private._raise('SE008', 'lease_token must not be null',
      jsonb_build_object('field', 'lease_token'), 'Pass the lease_token returned by settle.claim.');
  end if;
end
$$;

-- Slow path of settle.claim's validation.
create function settle_private._check_claim_args(
  tenant text, key text, request jsonb, principal text, scopes text[], binding_generation bigint,
  lease interval, worker text, max_attempts integer)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_operation_key(tenant, key);
  perform settle_private._check_binding(principal, scopes, binding_generation);
  perform settle_private._check_json(request, 'request', settle_private._limit('request_bytes'), 'SE004');
  perform settle_private._check_lease(lease);
  if worker is not null then
    perform settle_private._check_name(worker, 'worker', settle_private._limit('worker_bytes'), 'SE008');
  end if;
  perform settle_private._check_count(max_attempts, 'max_attempts', settle_private._limit('max_attempts'));
end
$$;

-- Slow path of the observation functions' validation.
create function settle_private._check_observation(
  kind text, tenant text, key text, attempt integer, lease_token uuid, fingerprint text,
  principal text, scopes text[], binding_generation bigint, result jsonb, error jsonb, retryable boolean)
returns void
language plpgsql
immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  perform settle_private._check_observation_args(tenant, key, attempt, lease_token);
  if fingerprint is null or fingerprint !~ '^v[0-9]+:[0-9a-f]{64}$' then
    perform settle_private._raise('SE004', 'fingerprint must be the value returned by settle.claim',
      jsonb_build_object('field', 'fingerprint'), 'Pass the fingerprint from the acquired claim; never compute it.');
  end if;
  perform settle_private._check_binding(principal, scopes, binding_generation);
  if kind = 'complete' then
    perform settle_private._check_json(result, 'result', settle_private._limit('result_bytes'), 'SE005');
  elsif kind = 'fail' then
    perform settle_private._check_json(error, 'error', settle_private._limit('error_bytes'), 'SE006');
    if retryable is null then
      perform settle_private._raise('SE006', 'retryable must be true or false',
        jsonb_build_object('field', 'retryable'), null);
    end if;
  end if;
end
$$;

-- Scopes are a set: stored and compared sorted (C collation) without duplicates.
create function settle_private._sort_scopes(scopes text[])
returns text[]
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  return array(select distinct s collate "C" from unnest(scopes) as s order by 1);
end
$$;

-- Inlined where it is used: no function call for the usual zero or one scope.
create function settle_private._normalize_scopes(scopes text[])
returns text[]
language sql
immutable
parallel safe
as $$
  select case when cardinality(scopes) < 2 then scopes else settle_private._sort_scopes(scopes) end
$$;

reset role;
