import { pathToFileURL } from 'node:url';
import { parseCommandArgs, type Command } from './command.js';
import { deadLettersCommand } from './commands/dead-letters.js';
import { distributeCommand } from './commands/distribute.js';
import { expireLeasesCommand } from './commands/expire-leases.js';
import { inspectCommand } from './commands/inspect.js';
import { migrateCommand } from './commands/migrate.js';
import { purgeCommand } from './commands/purge.js';
import { redriveCommand } from './commands/redrive.js';
import { resolveCommand } from './commands/resolve.js';
import { maintainCommand, scheduleCommand } from './commands/maintain.js';
import { simulateCommand } from './commands/simulate.js';
import { statsCommand } from './commands/stats.js';
import { reportError } from './errors.js';
import { EXIT } from './exit-codes.js';
import { printJson } from './output.js';
import { nearest } from './suggest.js';
import { UsageError } from './usage-error.js';
import { packageVersion } from './version.js';

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
  simulateCommand,
];

export const USAGE = `pg-settle: exactly-once settlement inside PostgreSQL - operator CLI and simulator

Usage: pg-settle <command> [arguments] [flags]

Commands:
${COMMANDS.map((c) => `  ${c.name.padEnd(15)}${c.summary}`).join('\n')}

Run \`pg-settle <command> --help\` for a command's flags, \`pg-settle --version\` for the version.
Every command but simulate needs --database-url URL or DATABASE_URL.
Exit codes: 0 ok, 1 invariant or operation failure, 2 usage error, 3 database or connection error.`;

/** Runs the CLI with `argv` (without node and script) and resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  const json = rest.includes('--json');
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const out = name === undefined ? process.stderr : process.stdout;
    out.write(`${USAGE}\n`);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  if (name === '--version' || name === '-v' || name === 'version') {
    if (json) printJson({ ok: true, command: 'version', version: packageVersion() });
    else process.stdout.write(`pg-settle ${packageVersion()}\n`);
    return EXIT.ok;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) {
    const suggestion = nearest(name, COMMANDS.map((c) => c.name));
    const hint = suggestion === undefined ? '' : ` - did you mean \`${suggestion}\`?`;
    return reportError(new UsageError(`unknown command ${JSON.stringify(name)}${hint}`), json, suggestion === undefined ? USAGE : undefined);
  }
  let input;
  try {
    input = parseCommandArgs(command, rest);
  } catch (error) {
    return reportError(error, json, command.help);
  }
  if (input.help) {
    process.stdout.write(`${command.help}\n`);
    return EXIT.ok;
  }
  try {
    return await command.run(input);
  } catch (error) {
    return reportError(error, input.json, command.help);
  }
}

const invokedDirectly = process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href;
if (invokedDirectly || process.env.PG_SETTLE_CLI_MAIN === '1') {
  const code = await main(process.argv.slice(2));
  process.exit(code);
}
