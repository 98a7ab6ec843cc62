// The HTTP examples run against a real database, and docs/http.md embeds each file verbatim.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../src/testing/index.js';

const files = ['examples/http/express-app.ts', 'examples/http/fastify-app.ts'];
const expectations: Record<string, unknown> = {
  'examples/http/express-app.ts': [
    expect.stringMatching(/^201 \/payments\/ch_\d+$/),
    '201 replayed=true',
    '422 application/problem+json',
    '422',
    '201',
    'charges=1',
  ],
  'examples/http/fastify-app.ts': ['201 201 replayed=true orders=1', '400', '200'],
};

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('http_examples');
  vi.spyOn(console, 'log').mockImplementation(() => {});
});
afterAll(async () => {
  vi.restoreAllMocks();
  await db?.drop();
});

describe('HTTP examples', () => {
  it.each(files)('%s runs against a real database', async (file) => {
    const example = (await import(`../../${file}`)) as { main: (databaseUrl: string) => Promise<unknown> };
    expect(await example.main(db.url)).toEqual(expectations[file]);
  });

  it.each(files)('docs/http.md embeds %s verbatim', (file) => {
    const doc = readFileSync('docs/http.md', 'utf8');
    const source = readFileSync(file, 'utf8');
    expect(doc).toContain(`<!-- example: ${file} -->\n\`\`\`ts\n${source}\`\`\`\n<!-- /example -->`);
  });
});
