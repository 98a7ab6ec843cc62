-- pkread baseline: a plain primary-key read of a table the size and shape of the replay set
-- (bench.pkread: a copy of the operations the replay scenario pre-completes), one prepared
-- SELECT per transaction. The replay target compares a claim of a completed key with it.
\set i random(1, :replay_keys)
SELECT o.settled_attempt
  FROM bench.pkread o
 WHERE o.tenant = 'bench' AND o.key = 'replay-' || :i::text AND o.status = 'completed' \gset
