import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { COMMANDS } from '../../src/cli/commands/index.js';

// What a first adopter reads to set up: the pages must agree with the code and with each other.
// (The HTTP setup line runs as the recommended CREATEROLE login in test/http/examples.test.ts.)
const read = (page: string): string => readFileSync(page, 'utf8');

describe('setup docs', () => {
  it('docs/cli.md lists every command with its summary, in order', () => {
    const cli = read('docs/cli.md');
    const block = cli.slice(cli.indexOf('pg-settle --version'), cli.indexOf('```', cli.indexOf('pg-settle --version')));
    const listed = [...block.matchAll(/^ {2}([a-z-]+) +(.+)$/gm)];
    expect(listed.map((m) => [m[1], m[2]])).toEqual(COMMANDS.map((c) => [c.name, c.summary]));
  });

  it("docs/operations.md's roles are the roles docs/sql-api.md grants", () => {
    const rolesOf = (page: string, from: string): string[] => {
      const doc = read(page);
      const start = doc.indexOf(from);
      const table = doc.slice(start, doc.indexOf('\n\n', doc.indexOf('| role |', start)));
      return [...table.matchAll(/^\| `(settle_[a-z]+)` \|/gm)].map((m) => m[1] ?? '');
    };
    const granted = rolesOf('docs/sql-api.md', '## Roles and grants');
    expect(granted).toHaveLength(6);
    expect(rolesOf('docs/operations.md', '**Roles.**')).toEqual(granted);
    expect(read('docs/operations.md')).toMatch(/create six cluster-wide `NOLOGIN` roles/);
  });

  it('operations.md "After a failover" says what the client does with an unconfirmed commit', () => {
    const ops = read('docs/operations.md');
    expect(ops).not.toMatch(/does not single it out/);
    expect(ops).toMatch(/SettleCommitUnconfirmedError/);
  });

  it('client.md documents the reconciler pacing and what it picks up', () => {
    const client = read('docs/client.md');
    expect(client).toMatch(/### What the reconciler picks up/);
    expect(client).toMatch(/`idleMs` \(30 s\)/);
  });
});
