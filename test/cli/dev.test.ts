import { spawn } from 'node:child_process';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { createSettleClient } from '../../src/client/client.js';
import { CLI_BIN, cliEnv, ROOT } from '../support/cli.js';

// `pg-settle dev` through the real binary: it prints an app DATABASE_URL on stdout, that URL
// works for the client as a settle_app login (and not for DDL), and Ctrl-C (SIGINT) stops the
// server (the URL stops answering) with exit 0. No Docker and no DATABASE_URL needed.

describe('pg-settle dev', () => {
  it('starts a migrated PostgreSQL, prints an app login URL, serves it until SIGINT', async () => {
    const env = cliEnv();
    delete env.DATABASE_URL;
    const child = spawn(process.execPath, [CLI_BIN, 'dev'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let stdout = '';
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    // Ready when the URL is on stdout and the last line of the banner on stderr.
    const line = await new Promise<string>((resolve, reject) => {
      const ready = (): void => {
        const match = /^DATABASE_URL=(\S+)$/m.exec(stdout);
        if (match?.[1] !== undefined && stderr.includes('up until Ctrl-C')) resolve(match[1]);
      };
      child.stdout.on('data', (chunk: Buffer) => {
        stdout += chunk.toString();
        ready();
      });
      child.stderr.on('data', (chunk: Buffer) => {
        stderr += chunk.toString();
        ready();
      });
      void exited.then((code) =>
        reject(new Error(`pg-settle dev exited ${code} before printing DATABASE_URL: ${stderr}`)),
      );
    });
    const url = new URL(line);
    expect(url.username).toBe('app');
    expect(url.hostname).toBe('127.0.0.1');
    expect(stderr).toContain('login app is granted settle_app');

    const settle = createSettleClient({ connectionString: line, poolSize: 1 });
    try {
      const input = { tenant: 'dev', key: 'k1', request: { n: 1 }, binding: { principal: 'me', generation: 1 } };
      expect((await settle.run(input, async () => ({ ok: true }))).outcome).toBe('completed');
      expect((await settle.run(input, async () => ({ ok: false }))).outcome).toBe('replay');
    } finally {
      await settle.end();
    }
    const plain = new pg.Client({ connectionString: line });
    await plain.connect();
    await expect(plain.query('create table app_owned (id int)')).rejects.toMatchObject({ code: '42501' });
    await plain.end();

    child.kill('SIGINT');
    expect(await exited).toBe(0);
    const after = new pg.Client({ connectionString: line, connectionTimeoutMillis: 5_000 });
    await expect(after.connect()).rejects.toThrow();
  }, 240_000);
});
