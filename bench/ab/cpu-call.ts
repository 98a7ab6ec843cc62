// Server CPU per claim + complete cycle of several engine builds, each call its own transaction
// (as pgbench and the client send them, so PL/pgSQL's per-transaction set-up is counted), from
// the backend's own CPU time (/proc/<pid>/schedstat): immune to the wall-clock noise of a
// shared machine. Commits are asynchronous in the measuring session (SET synchronous_commit =
// off) so that the kernel's fsync time, the same for every build, does not blur the engine's
// own CPU; bench/ab/cpu-loop.ts measures the loop without commits instead. Builds alternate in
// rounds; the minimum per build is reported. Needs the server on this machine.
//   npx tsx bench/ab/cpu-call.ts <rounds> <cycles> <label>=<connection url> ...
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [roundsArg, cyclesArg, ...specs] = process.argv.slice(2);
const rounds = Number(roundsArg);
const cycles = Number(cyclesArg);
interface Build {
  label: string;
  url: string;
  us: number[];
  ratios?: number[];
}
const builds: Build[] = specs.map((spec) => ({
  label: spec.slice(0, spec.indexOf('=')),
  url: spec.slice(spec.indexOf('=') + 1),
  us: [],
}));
const cpuNs = (pid: number): number => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
const claim = {
  name: 'claim',
  text: `select c.attempt, c.lease_token, c.fingerprint
           from settle.claim(tenant => 'bench', key => $1, request => jsonb_build_object('amount', $2::integer, 'currency', 'EUR'),
                             principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                             lease => interval '30 seconds', worker => 'ab') c
          where c.outcome = 'acquired'`,
};
const complete = {
  name: 'complete',
  text: `select r.outcome
           from settle.complete(tenant => 'bench', key => $1, attempt => $2::integer, lease_token => $3::uuid,
                                fingerprint => $4::text, principal => 'bench-app', scopes => array['payments.write'],
                                binding_generation => 0, result => jsonb_build_object('charge', $1::text)) r
          where r.outcome = 'settled'`,
};

async function run(client: pg.Client, label: string, round: number | string, count: number): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    const key = `ab-${label}-${round}-${i}-${Math.random()}`;
    const acquired = (await client.query({ ...claim, values: [key, i] })).rows[0];
    if (acquired === undefined) throw new Error(`${label}: claim ${i} did not acquire`);
    const settled = await client.query({
      ...complete,
      values: [key, acquired.attempt, acquired.lease_token, acquired.fingerprint],
    });
    if (settled.rowCount !== 1) throw new Error(`${label}: complete ${i} did not settle`);
  }
}

// CHUNK=N interleaves the builds every N cycles inside each round (one session per build kept
// open for the round), so a slow phase of a shared machine hits every build alike; it also
// prints each round's ratio of every build to the first and the median of those ratios.
const chunk = Number(process.env.CHUNK ?? 0);
for (let round = 1; round <= rounds; round += 1) {
  if (chunk > 0) {
    const sessions: { b: Build; client: pg.Client; pid: number; ns: number }[] = [];
    for (const b of builds) {
      const client = new pg.Client({ connectionString: b.url });
      await client.connect();
      const pid = (await client.query('select pg_backend_pid() as pid')).rows[0].pid;
      await client.query('set synchronous_commit = off');
      await run(client, b.label, `w${round}`, 200);
      sessions.push({ b, client, pid, ns: 0 });
    }
    for (let done = 0; done < cycles; done += chunk) {
      for (const s of sessions) {
        const before = cpuNs(s.pid);
        await run(s.client, s.b.label, `${round}-${done}`, Math.min(chunk, cycles - done));
        s.ns += cpuNs(s.pid) - before;
      }
    }
    const base = sessions[0];
    if (base === undefined) throw new Error('no build given');
    for (const s of sessions) {
      await s.client.end();
      const us = s.ns / cycles / 1000;
      s.b.us.push(us);
      s.b.ratios = [...(s.b.ratios ?? []), us / (base.ns / cycles / 1000)];
      console.log(
        `${s.b.label} round=${round} cpu_us_per_cycle=${us.toFixed(1)} ratio_to_${base.b.label}=${(us / (base.ns / cycles / 1000)).toFixed(3)}`,
      );
    }
    continue;
  }
  for (const b of builds) {
    const client = new pg.Client({ connectionString: b.url });
    await client.connect();
    const pid = (await client.query('select pg_backend_pid() as pid')).rows[0].pid;
    await client.query('set synchronous_commit = off');
    await run(client, b.label, `w${round}`, 200); // warm the session's plans and caches
    const before = cpuNs(pid);
    await run(client, b.label, round, cycles);
    const us = (cpuNs(pid) - before) / cycles / 1000;
    await client.end();
    b.us.push(us);
    console.log(`${b.label} round=${round} cpu_us_per_cycle=${us.toFixed(1)}`);
  }
}
for (const b of builds) {
  const sorted = [...b.us].sort((x, y) => x - y);
  const ratios = [...(b.ratios ?? [])].sort((x, y) => x - y);
  const middle = (xs: number[]): number => xs[Math.floor(xs.length / 2)] ?? Number.NaN;
  const ratio =
    ratios.length > 0
      ? ` median_ratio_to_${builds[0]?.label}=${middle(ratios).toFixed(3)} (rounds: ${(b.ratios ?? []).map((r) => r.toFixed(2)).join(', ')})`
      : '';
  console.log(
    `${b.label} min=${(sorted[0] ?? Number.NaN).toFixed(1)} median=${middle(sorted).toFixed(1)} us/cycle${ratio}`,
  );
}
