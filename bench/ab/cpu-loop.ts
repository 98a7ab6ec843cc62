// Server CPU per claim + complete cycle of several engine builds, from the backend's own CPU
// time (/proc/<pid>/schedstat, nanoseconds on a CPU): immune to the wall-clock noise of a shared
// machine. Each build's database runs bench/sql/cycle-cpu-loop.sql's loop (3000 cycles in one
// DO block: no commits, no client) in alternating rounds; the minimum per build is reported.
// Needs the server on this machine (schedstat of its backends).
//   npx tsx bench/ab/cpu-loop.ts <rounds> <label>=<connection url> ...
import { readFileSync } from 'node:fs';
import pg from 'pg';

const [roundsArg, ...specs] = process.argv.slice(2);
const rounds = Number(roundsArg);
const loop = readFileSync(new URL('../sql/cycle-cpu-loop.sql', import.meta.url), 'utf8').replace(/^\\timing on$/m, '');
const builds = specs.map((spec) => ({
  label: spec.slice(0, spec.indexOf('=')),
  url: spec.slice(spec.indexOf('=') + 1),
  ns: [] as number[],
}));
const cpuNs = (pid: number): number => Number(readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]);
for (let round = 1; round <= rounds; round += 1) {
  for (const b of builds) {
    const client = new pg.Client({ connectionString: b.url });
    await client.connect();
    const pid = (await client.query('select pg_backend_pid() as pid')).rows[0].pid;
    await client.query(loop.replaceAll('3000', '300')); // warm the session's plans
    const before = cpuNs(pid);
    await client.query(loop);
    const ns = cpuNs(pid) - before;
    await client.end();
    b.ns.push(ns);
    console.log(`${b.label} round=${round} cpu_us_per_cycle=${(ns / 3000 / 1000).toFixed(1)}`);
  }
}
for (const b of builds) {
  const sorted = [...b.ns].sort((x, y) => x - y);
  const at = (i: number): number => sorted[i] ?? Number.NaN;
  console.log(
    `${b.label} min=${(at(0) / 3e6).toFixed(1)} median=${(at(Math.floor(sorted.length / 2)) / 3e6).toFixed(1)} us/cycle`,
  );
}
