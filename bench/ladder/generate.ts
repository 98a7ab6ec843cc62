// The ladder's steps as files (bench/lib/ladder-files.ts): for every step, <out>/<id>/schema.sql
// (schema `p`: the prototype plus the engine's properties up to that step), cycle.sql (its
// pgbench script) and migrations/ (the engine's migrations, then the step's schema: a build for
// bench/ab/migrations.sh, e.g. `WAL=1 bash bench/ab/migrations.sh s5=<out>/s5/migrations@<out>/s5/cycle.sql`).
// `diff -u <out>/s4c/schema.sql <out>/s5/schema.sql` shows what a step adds.
//   npx tsx bench/ladder/generate.ts [--out bench/out/ladder] [--steps s0,s5]
import path from 'node:path';
import { parseArgs } from 'node:util';
import { LADDER_OUT, writeLadder } from '../lib/ladder-files.js';
import { selectSteps } from '../lib/ladder-steps.js';

const { values } = parseArgs({
  options: {
    out: { type: 'string', default: LADDER_OUT },
    steps: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (values.help) {
  console.log('Usage: npx tsx bench/ladder/generate.ts [--out bench/out/ladder] [--steps s0,s1,...]');
  process.exit(0);
}
const out = path.resolve(values.out);
const written = await writeLadder(out, selectSteps(values.steps?.split(',').map((s) => s.trim())));
console.log(`wrote ${written.length} ladder steps to ${out}`);
