#!/usr/bin/env node
// pg-settle launcher: the compiled CLI when the package is built (dist/), else the TypeScript
// sources through tsx (a dev dependency, present in a checkout).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const built = new URL('../dist/src/cli/main.js', import.meta.url);
process.env.PG_SETTLE_CLI_MAIN = '1';
if (existsSync(fileURLToPath(built))) {
  await import(built.href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(new URL('../src/cli/main.ts', import.meta.url).href);
}
