#!/usr/bin/env node
// pg-settle launcher: the compiled CLI (dist/, built by `npm pack` / `npm publish` through the
// prepack script, and shipped in the package), else the TypeScript sources through tsx (a dev
// dependency). PG_SETTLE_CLI_FROM_SOURCE=1 forces the sources (the CLI tests, while editing).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/src/cli/main.js', import.meta.url);
process.env.PG_SETTLE_CLI_MAIN = '1';
if (process.env.PG_SETTLE_CLI_FROM_SOURCE !== '1' && existsSync(fileURLToPath(built))) {
  await import(built.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(new URL('../src/cli/main.ts', import.meta.url).href);
}
