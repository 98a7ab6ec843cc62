// The CLI's commands, in the order `pg-settle --help` lists them. Loaded by main() only when a
// command (or the help) is asked for: `pg-settle --version` imports none of them (start-up time).
import { consoleCommand } from './console.js';
import { deadLettersCommand } from './dead-letters.js';
import { devCommand } from './dev.js';
import { distributeCommand } from './distribute.js';
import { expireLeasesCommand } from './expire-leases.js';
import { feedCommand } from './feed.js';
import { inspectCommand } from './inspect.js';
import { migrateCommand } from './migrate.js';
import { purgeCommand } from './purge.js';
import { redriveCommand } from './redrive.js';
import { resolveCommand } from './resolve.js';
import { maintainCommand, scheduleCommand } from './maintain.js';
import { simulateCommand } from './simulate.js';
import { statsCommand } from './stats.js';
import type { Command } from '../command.js';

export const COMMANDS: readonly Command[] = [
  migrateCommand,
  distributeCommand,
  inspectCommand,
  deadLettersCommand,
  redriveCommand,
  resolveCommand,
  expireLeasesCommand,
  purgeCommand,
  maintainCommand,
  scheduleCommand,
  statsCommand,
  feedCommand,
  consoleCommand,
  simulateCommand,
  devCommand,
];

export const USAGE = `pg-settle: exactly-once settlement inside PostgreSQL - operator CLI and simulator

Usage: pg-settle <command> [arguments] [flags]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(15)}${c.summary}`).join('\n')}

Run \`pg-settle <command> --help\` for a command's flags, \`pg-settle --version\` for the version.
Every command but simulate and dev needs --database-url URL or DATABASE_URL.
Exit codes: 0 ok, 1 invariant or operation failure, 2 usage error, 3 database or connection error.`;
