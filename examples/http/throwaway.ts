// Runs one HTTP example against a throwaway PostgreSQL of its own, for when no database is at
// hand: `npx tsx examples/http/throwaway.ts express-app` (or fastify-app, hono-app). It does what
// docs/http.md's setup line does as an admin (a login `shop_app` granted settle_app, that may
// create in schema `shop`), runs the example's main() as that login, and deletes the server when it ends
// (examples/support/throwaway-database.ts, as the other examples). The example files themselves
// stay what an application copies: they take a DATABASE_URL.
import { runExample } from '../support/throwaway-database.js';

const examples = {
  'express-app': async () => (await import('./express-app.js')).main,
  'fastify-app': async () => (await import('./fastify-app.js')).main,
  'hono-app': async () => (await import('./hono-app.js')).main,
} as const;

const name = process.argv[2];
if (name !== 'express-app' && name !== 'fastify-app' && name !== 'hono-app') {
  process.stderr.write(`usage: npx tsx examples/http/throwaway.ts ${Object.keys(examples).join(' | ')}\n`);
  process.exit(2);
}
const main = await examples[name]();
await runExample(
  import.meta.url,
  { logins: { shop_app: ['settle_app'] }, adminStatements: ['create schema shop', 'grant usage, create on schema shop to shop_app'] },
  (urls) => main(urls.shop_app),
);
