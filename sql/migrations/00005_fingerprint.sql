-- 00005: the request fingerprint.
--
-- Why: the reservation lock binds the intent of a request, not its spelling. The fingerprint
-- is a versioned hash ('v1:' || sha256 hex) of a canonical JSON form in which key order,
-- spacing and trailing fractional zeros do not matter. settle.claim computes it once, at first
-- claim; observations must present it back. A new algorithm would be 'v2:' in a new migration,
-- never a change of v1 (stored fingerprints must keep matching).

set local role settle_owner;

-- Slow path of the canonical JSON form: jsonb's own text rendering, with every number
-- rendered without trailing fractional zeros (10.50 and 10.5 are the same amount).
create function settle_private._canonical_json_slow(value jsonb)
returns text
language plpgsql
immutable
strict
parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  case jsonb_typeof(value)
    when 'object' then
      return '{' || coalesce((
        select string_agg(to_jsonb(e.k)::text || ': ' || settle_private._canonical_json_slow(e.v), ', ' order by e.n)
        from jsonb_each(value) with ordinality as e(k, v, n)), '') || '}';
    when 'array' then
      return '[' || coalesce((
        select string_agg(settle_private._canonical_json_slow(e.v), ', ' order by e.n)
        from jsonb_array_elements(value) with ordinality as e(v, n)), '') || ']';
    when 'number' then
      return trim_scale(value::numeric)::text;
    else
      return value::text;
  end case;
end
$$;

-- No SET search_path: reached only through _fingerprint from the engine's SECURITY DEFINER
-- functions, which pin it (a SET clause costs a GUC save and restore per call).
create function settle_private._canonical_json(value jsonb)
returns text
language plpgsql
immutable
strict
parallel safe
as $$
declare
  v_text text := value::text;
begin
  -- Without a '.', jsonb's rendering is already canonical (keys sorted, one space after
  -- ':' and ',', exponents expanded); only fractional numbers need the slow path.
  if position('.' in v_text) = 0 then
    return v_text;
  end if;
  return settle_private._canonical_json_slow(value);
end
$$;

-- fingerprint(request) -> 'v1:<sha256 hex>' of the canonical JSON form of request.
-- STABLE because convert_to is (see _json_ok): declared so, it is inlined into claim's
-- expression instead of parsed and planned on every call. Its result depends on nothing but
-- request (the database encoding is UTF8, enforced by SE030).
create function settle_private._fingerprint(request jsonb)
returns text
language sql
stable
strict
parallel safe
as $$
  select 'v1:' || encode(sha256(convert_to(settle_private._canonical_json(request), 'UTF8')), 'hex')
$$;

create function settle.fingerprint(request jsonb)
returns text
language sql
immutable
strict
parallel safe
security definer
set search_path = pg_catalog, pg_temp
as $$
  select settle_private._fingerprint(request)
$$;

comment on function settle.fingerprint(jsonb) is
  'Request fingerprint, algorithm v1: ''v1:'' || hex(sha256(canonical JSON text)).
Parameters: request jsonb (the effect-defining fields).
Canonical form: PostgreSQL jsonb text rendering (keys de-duplicated and sorted, fixed spacing) with numbers printed without trailing fractional zeros, so {"b":1,"a":10.50} and {"a":10.5,"b":1} share a fingerprint.
Outcomes: text; NULL for NULL input.
Locking: none. Idempotency: pure (IMMUTABLE). settle.claim computes it once, at first claim; clients never compute it.';

reset role;
