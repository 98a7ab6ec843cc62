// Server CPU of each call of the cycle, claim and complete apart, and of a replay (claim of a
// completed key), for several engine builds: each call its own transaction, backend CPU from
// /proc/<pid>/schedstat around each call, commits asynchronous (as bench/ab/cpu-call.ts).
// Builds interleave every CHUNK cycles inside each round; prints per build the median of the
// rounds' per-call CPU and its ratio to the first build.
//   CHUNK=25 npx tsx bench/ab/cpu-split.ts <rounds> <cycles> <label>=<connection url> ...
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [roundsArg, cyclesArg, ...specs] = process.argv.slice(2);
const rounds = Number(roundsArg);
const cycles = Number(cyclesArg);
const chunk = Number(process.env.CHUNK ?? 25);
/** Microseconds of server CPU per call, one round of one build. */
interface Round {
  claim: number;
  complete: number;
  replay: number;
  cycle: number;
}
interface Build {
  label: string;
  url: string;
  rounds: Round[];
}
interface Session {
  b: Build;
  client: pg.Client;
  pid: number;
  claim: number;
  complete: number;
  replay: number;
}
const builds: Build[] = specs.map((spec) => ({
  label: spec.slice(0, spec.indexOf('=')),
  url: spec.slice(spec.indexOf('=') + 1),
  rounds: [],
}));
const cpuNs = (pid: number): number => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
const claim = {
  name: 'claim',
  text: `select c.outcome, c.attempt, c.lease_token, c.fingerprint
           from settle.claim(tenant => 'bench', key => $1, request => jsonb_build_object('amount', $2::integer, 'currency', 'EUR'),
                             principal => 'bench-app', scopes => array['payments.write'], binding_generation => 0,
                             lease => interval '30 seconds', worker => 'ab') c`,
};
const complete = {
  name: 'complete',
  text: `select r.outcome
           from settle.complete(tenant => 'bench', key => $1, attempt => $2::integer, lease_token => $3::uuid,
                                fingerprint => $4::text, principal => 'bench-app', scopes => array['payments.write'],
                                binding_generation => 0, result => jsonb_build_object('charge', $1::text)) r`,
};

async function cycle(s: Session, count: number, tag: string): Promise<void> {
  for (let i = 0; i < count; i += 1) {
    const key = `ab-${s.b.label}-${tag}-${i}-${Math.random()}`;
    let t = cpuNs(s.pid);
    const acquired = (await s.client.query({ ...claim, values: [key, i] })).rows[0];
    let u = cpuNs(s.pid);
    s.claim += u - t;
    if (acquired?.outcome !== 'acquired') throw new Error(`${s.b.label}: claim answered ${acquired?.outcome}`);
    const settled = (
      await s.client.query({ ...complete, values: [key, acquired.attempt, acquired.lease_token, acquired.fingerprint] })
    ).rows[0];
    t = cpuNs(s.pid);
    s.complete += t - u;
    if (settled?.outcome !== 'settled') throw new Error(`${s.b.label}: complete answered ${settled?.outcome}`);
    const replayed = (await s.client.query({ ...claim, values: [key, i] })).rows[0];
    u = cpuNs(s.pid);
    s.replay += u - t;
    if (replayed?.outcome !== 'replay') throw new Error(`${s.b.label}: replay answered ${replayed?.outcome}`);
  }
}

const med = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? Number.NaN;
for (let round = 1; round <= rounds; round += 1) {
  const sessions: Session[] = [];
  for (const b of builds) {
    const client = new pg.Client({ connectionString: b.url });
    await client.connect();
    const pid = (await client.query('select pg_backend_pid() as pid')).rows[0].pid;
    await client.query('set synchronous_commit = off');
    const s: Session = { b, client, pid, claim: 0, complete: 0, replay: 0 };
    await cycle(s, 100, `w${round}`);
    s.claim = 0;
    s.complete = 0;
    s.replay = 0;
    sessions.push(s);
  }
  // The order of the builds rotates from chunk to chunk: no build always runs first.
  for (let done = 0, turn = 0; done < cycles; done += chunk, turn += 1) {
    for (let j = 0; j < sessions.length; j += 1) {
      const s = sessions[(j + turn) % sessions.length];
      if (s !== undefined) await cycle(s, Math.min(chunk, cycles - done), `${round}-${done}`);
    }
  }
  for (const s of sessions) {
    await s.client.end();
    const claimUs = s.claim / cycles / 1000;
    const completeUs = s.complete / cycles / 1000;
    const r: Round = {
      claim: claimUs,
      complete: completeUs,
      replay: s.replay / cycles / 1000,
      cycle: claimUs + completeUs,
    };
    s.b.rounds.push(r);
    const f = sessions[0]?.b.rounds.at(-1) ?? r;
    console.log(
      `${s.b.label} round=${round} claim=${r.claim.toFixed(1)} complete=${r.complete.toFixed(1)} cycle=${r.cycle.toFixed(1)} replay=${r.replay.toFixed(1)} us` +
        (s === sessions[0]
          ? ''
          : ` ratio cycle=${(r.cycle / f.cycle).toFixed(3)} claim=${(r.claim / f.claim).toFixed(3)} complete=${(r.complete / f.complete).toFixed(3)} replay=${(r.replay / f.replay).toFixed(3)}`),
    );
  }
}
const first = builds[0];
for (const b of builds) {
  if (first === undefined) break;
  const m = (k: keyof Round): number => med(b.rounds.map((r) => r[k]));
  const ratio = (k: keyof Round): number => med(b.rounds.map((r, i) => r[k] / (first.rounds[i]?.[k] ?? Number.NaN)));
  console.log(
    `${b.label} median us: claim=${m('claim').toFixed(1)} complete=${m('complete').toFixed(1)} cycle=${m('cycle').toFixed(1)} replay=${m('replay').toFixed(1)}` +
      (b === first
        ? ''
        : ` | median ratio to ${first.label}: cycle=${ratio('cycle').toFixed(3)} claim=${ratio('claim').toFixed(3)} complete=${ratio('complete').toFixed(3)} replay=${ratio('replay').toFixed(3)}`),
  );
}
