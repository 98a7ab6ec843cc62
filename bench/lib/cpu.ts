import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type pg from 'pg';
import { BENCH_DIR } from './database.js';
import { loadScript, runScript } from './script-runner.js';

/**
 * Server CPU per operation of one backend. The cpu scenario runs a pgbench script
 * (bench/scripts/cycle.sql, the engine; spec4.sql, the same rows in plain SQL) from Node on
 * one connection, every statement its own autocommit transaction as under pgbench, so the
 * per-transaction costs (PL/pgSQL expression set-up, executor start, commit) are counted and
 * the client's are not. The loop files of bench/sql (one DO block, no commits) show the
 * in-transaction cost alone; bench/perf-profile.ts profiles them. The backend's own CPU time
 * comes from /proc/<pid>/schedstat (nanoseconds on the CPU) when the server runs on this
 * machine, so the other processes of a shared machine do not inflate it; otherwise the wall
 * time stands in.
 */
export interface CpuLoopMeasurement {
  /** Operations measured (each one claim + complete, or its plain-SQL rows). */
  readonly operations: number;
  readonly cpuUsPerOp: number;
  readonly wallUsPerOp: number;
  /** 'schedstat' when the backend's CPU was read, 'wall' when only the wall time was. */
  readonly source: 'schedstat' | 'wall';
}

export const CPU_LOOPS = { cycle: 'cycle-cpu-loop.sql', spec4: 'spec4-cpu-loop.sql' } as const;
export const CPU_SCRIPTS = { cycle: 'cycle.sql', spec4: 'spec4.sql' } as const;

/** The loop file without its psql meta-commands (\timing), and its iteration count. */
export async function readCpuLoop(file: string): Promise<{ sql: string; operations: number }> {
  const text = await readFile(path.join(BENCH_DIR, 'sql', file), 'utf8');
  const sql = text
    .split('\n')
    .filter((line) => !line.startsWith('\\'))
    .join('\n');
  const loop = /for i in 1\.\.(\d+) loop/.exec(sql);
  if (loop?.[1] === undefined) throw new Error(`${file}: no "for i in 1..N loop"`);
  return { sql, operations: Number(loop[1]) };
}

async function backendCpuNs(pid: number): Promise<number | null> {
  try {
    const text = await readFile(`/proc/${pid}/schedstat`, 'utf8');
    const ns = Number(text.split(' ')[0]);
    return Number.isFinite(ns) ? ns : null;
  } catch {
    return null;
  }
}

/** Backend CPU of `operations` runs of a bench/scripts file, after an unmeasured fifth as warm-up. */
export async function measureCpuScript(db: pg.Client, file: string, operations: number): Promise<CpuLoopMeasurement> {
  const script = await loadScript(file);
  await runScript(db, script, Math.max(1, Math.floor(operations / 5)));
  return measureBackend(db, operations, () => runScript(db, script, operations));
}

/** Backend CPU of one loop file of bench/sql (one DO block, no commits). */
export async function measureCpuLoop(db: pg.Client, file: string): Promise<CpuLoopMeasurement> {
  const { sql, operations } = await readCpuLoop(file);
  return measureBackend(db, operations, () => db.query(sql));
}

async function measureBackend(
  db: pg.Client,
  operations: number,
  work: () => Promise<unknown>,
): Promise<CpuLoopMeasurement> {
  const pid = Number((await db.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]?.pid);
  const cpuBefore = await backendCpuNs(pid);
  const wallBefore = process.hrtime.bigint();
  await work();
  const wallNs = Number(process.hrtime.bigint() - wallBefore);
  const cpuAfter = await backendCpuNs(pid);
  const cpuNs = cpuBefore !== null && cpuAfter !== null ? cpuAfter - cpuBefore : null;
  return {
    operations,
    cpuUsPerOp: (cpuNs ?? wallNs) / 1000 / operations,
    wallUsPerOp: wallNs / 1000 / operations,
    source: cpuNs === null ? 'wall' : 'schedstat',
  };
}
