import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { SNIPPET_DOCUMENTS, STRICT_COMPILER_OPTIONS, snippetsOf } from '../package/snippets.js';

// Every TypeScript block of the docs that imports the package compiles under the strict options
// an application uses, against this checkout's sources (the packaging test, `npm run
// test:package`, compiles the same blocks against the packed tarball). Fast enough for every run.
const ROOT = path.resolve(import.meta.dirname, '../..');
const run = promisify(execFile);
let dir: string | undefined;
afterAll(async () => {
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

describe('documentation snippets', () => {
  it('the snippet list names every page with a TypeScript block that imports the package', async () => {
    const pages = [
      'README.md',
      ...(await readdir(path.join(ROOT, 'docs'))).filter((f) => f.endsWith('.md')).map((f) => `docs/${f}`),
    ];
    const withSnippets: string[] = [];
    for (const page of pages)
      if (snippetsOf(await readFile(path.join(ROOT, page), 'utf8'), page).length > 0) withSnippets.push(page);
    expect([...SNIPPET_DOCUMENTS].sort()).toEqual(withSnippets.sort());
  });

  it('every snippet compiles under strict options', { timeout: 240_000 }, async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'pg-settle-snippets-'));
    await symlink(path.join(ROOT, 'node_modules'), path.join(dir, 'node_modules'));
    await writeFile(path.join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
    const files: string[] = [];
    for (const document of SNIPPET_DOCUMENTS) {
      for (const snippet of snippetsOf(await readFile(path.join(ROOT, document), 'utf8'), document)) {
        files.push(`${snippet.name}.ts`);
        await writeFile(path.join(dir, `${snippet.name}.ts`), snippet.source);
      }
    }
    expect(files.length).toBeGreaterThan(15);
    const src = (p: string) => [path.join(ROOT, p)];
    await writeFile(
      path.join(dir, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          ...STRICT_COMPILER_OPTIONS,
          // The sources stand in for the package's declarations here, and they are compiled with
          // the repository's options (`npm run typecheck`); the packaging test adds
          // exactOptionalPropertyTypes against the built declarations.
          exactOptionalPropertyTypes: false,
          skipLibCheck: true,
          noEmit: true,
          allowImportingTsExtensions: true,
          typeRoots: [path.join(ROOT, 'node_modules/@types')],
          paths: {
            'pg-settle': src('src/index.ts'),
            'pg-settle/express': src('src/http/express.ts'),
            'pg-settle/fastify': src('src/http/fastify.ts'),
            'pg-settle/fetch': src('src/http/fetch.ts'),
            'pg-settle/testing': src('src/testing/index.ts'),
          },
        },
        files,
      }),
    );
    const tsc = path.join(ROOT, 'node_modules/typescript/bin/tsc');
    const result = await run(process.execPath, [tsc, '-p', dir], { cwd: dir }).then(
      () => '',
      (error: { stdout?: string }) => error.stdout ?? String(error),
    );
    expect(result).toBe('');
  });
});
