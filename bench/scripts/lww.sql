-- lww baseline: one naive last-write-wins upsert per operation (code without pg-settle).
\set k random(100000000000, 999999999999)
INSERT INTO bench.lww (key, result, updated_at)
VALUES ('op-' || :k::text || '-' || :client_id::text, jsonb_build_object('charge', 'ch-' || :k::text), now())
ON CONFLICT (key) DO UPDATE SET result = excluded.result, updated_at = excluded.updated_at;
