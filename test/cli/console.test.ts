import { spawn } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/database.js';
import { CLI_BIN, cliEnv, ROOT } from '../support/cli.js';

// `pg-settle console` through the real binary: each line on its stdin (Enter in its terminal)
// prints a new one-time sign-in address, so a signed-out operator gets back in without a restart.

let db: TestDatabase;

beforeAll(async () => {
  db = await createTestDatabase('cli_console');
});
afterAll(async () => {
  await db?.drop();
});

/** The next JSON object the process prints (pretty-printed: it ends with a `}` line). */
function nextLine(objects: string[], wait: () => Promise<void>): Promise<Record<string, unknown>> {
  return (async () => {
    while (objects.length === 0) await wait();
    return JSON.parse(objects.shift() as string) as Record<string, unknown>;
  })();
}

async function signIn(open: string): Promise<number> {
  const response = await fetch(open, { redirect: 'manual' });
  await response.text();
  return response.status;
}

describe('pg-settle console', { timeout: 180_000 }, () => {
  it('prints a new one-time sign-in address for each line on stdin', async () => {
    const env = cliEnv();
    delete env.DATABASE_URL;
    delete env.PG_SETTLE_CONSOLE_TOKEN;
    const child = spawn(process.execPath, [CLI_BIN, 'console', '--port', '0', '--json', '--database-url', db.url], {
      cwd: ROOT,
      env,
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const objects: string[] = [];
    let buffered = '';
    let notify: () => void = () => {};
    child.stdout.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const parts = buffered.split(/^\}\n/m);
      buffered = parts.pop() ?? '';
      objects.push(...parts.map((p) => `${p}}`));
      notify();
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
    });
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const wait = () =>
      new Promise<void>((resolve, reject) => {
        notify = resolve;
        exited.then(() => reject(new Error(`the console exited: ${stderr}`)));
      });
    try {
      const first = await nextLine(objects, wait);
      expect(first).toMatchObject({ ok: true, command: 'console' });
      expect(await signIn(first.open as string)).toBe(303);
      expect(await signIn(first.open as string)).toBe(401);
      child.stdin.write('\n');
      const second = await nextLine(objects, wait);
      expect(second.url).toBe(first.url);
      expect(second.open).not.toBe(first.open);
      expect(await signIn(second.open as string)).toBe(303);
      expect(await signIn(second.open as string)).toBe(401);
    } finally {
      child.kill('SIGINT');
      await exited;
    }
  });
});
