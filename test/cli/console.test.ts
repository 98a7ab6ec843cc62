import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { CLI_BIN, cliEnv, ROOT } from '../support/cli.js';

// `pg-settle console` through the real binary: each line on its stdin (Enter in its terminal)
// prints a new one-time sign-in address, so a signed-out operator gets back in without a restart;
// bound to every interface it prints an address a browser can use, and warns.

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase('cli_console');
});
afterAll(async () => {
  await db?.drop();
});

interface RunningCli {
  readonly child: ChildProcessWithoutNullStreams;
  /** The next JSON object the process prints (pretty-printed: it ends with a `}` line). */
  next(): Promise<Record<string, unknown>>;
  stderr(): string;
  stop(): Promise<void>;
}

function startCli(args: readonly string[]): RunningCli {
  const env = cliEnv();
  delete env.DATABASE_URL;
  delete env.PG_SETTLE_CONSOLE_TOKEN;
  const child = spawn(process.execPath, [CLI_BIN, 'console', ...args, '--json', '--database-url', db.url], {
    cwd: ROOT,
    env,
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  const objects: string[] = [];
  let buffered = '';
  let stderr = '';
  let notify: () => void = () => {};
  child.stdout.on('data', (chunk: Buffer) => {
    buffered += chunk.toString('utf8');
    const parts = buffered.split(/^\}\n/m);
    buffered = parts.pop() ?? '';
    objects.push(...parts.map((p) => `${p}}`));
    notify();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    stderr += chunk.toString('utf8');
  });
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const wait = () =>
    new Promise<void>((resolve, reject) => {
      notify = resolve;
      exited.then(() => reject(new Error(`the console exited: ${stderr}`)));
    });
  return {
    child,
    async next() {
      while (objects.length === 0) await wait();
      return JSON.parse(objects.shift() as string) as Record<string, unknown>;
    },
    stderr: () => stderr,
    async stop() {
      child.kill('SIGINT');
      await exited;
    },
  };
}

async function status(address: string): Promise<number> {
  const response = await fetch(address, { redirect: 'manual' });
  await response.text();
  return response.status;
}

describe('pg-settle console', { timeout: 180_000 }, () => {
  it('prints a new one-time sign-in address for each line on stdin', async () => {
    const cli = startCli(['--port', '0']);
    try {
      const first = await cli.next();
      expect(first).toMatchObject({ ok: true, command: 'console', exposed: false });
      expect(await status(first.open as string)).toBe(303);
      expect(await status(first.open as string)).toBe(401);
      cli.child.stdin.write('\n');
      const second = await cli.next();
      expect(second.url).toBe(first.url);
      expect(second.open).not.toBe(first.open);
      expect(await status(second.open as string)).toBe(303);
      expect(await status(second.open as string)).toBe(401);
    } finally {
      await cli.stop();
    }
  });

  it('bound to every interface, prints an address a browser can use and warns that it is exposed', async () => {
    const cli = startCli(['--port', '0', '--host', '0.0.0.0']);
    try {
      const started = await cli.next();
      const url = new URL(started.url as string);
      expect(url.hostname).not.toBe('0.0.0.0');
      expect(started.exposed).toBe(true);
      expect(cli.stderr()).toContain('warning: bound to 0.0.0.0, reachable from other machines over plain HTTP');
      // Each address it names answers (the sign-in page), none is refused as another host (421).
      // (The machine's host name is among them; this machine may not resolve it: addresses only.)
      const addresses = (started.urls as string[]).filter((a) => /^http:\/\/(\d|\[)/.test(a));
      expect(addresses.length).toBeGreaterThan(0);
      for (const address of addresses) expect(await status(`${address}/`), address).toBe(401);
      expect(await status(started.open as string)).toBe(303);
    } finally {
      await cli.stop();
    }
  });
});
