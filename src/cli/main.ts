import { pathToFileURL } from 'node:url';
import { EXIT } from './exit-codes.js';
import { printJson } from './output.js';
import { packageVersion } from './version.js';

// Only what `--version` needs is imported up front; the commands (and through them slonik, zod,
// pg) are imported when one is run, so `pg-settle --version` starts in about the time Node takes
// (test/cli/startup.test.ts checks that it loads nothing from node_modules).

/** Runs the CLI with `argv` (without node and script) and resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  const json = rest.includes('--json');
  if (name === '--version' || name === '-v' || name === 'version') {
    if (json) printJson({ ok: true, command: 'version', version: packageVersion() });
    else process.stdout.write(`pg-settle ${packageVersion()}\n`);
    return EXIT.ok;
  }
  const [{ COMMANDS, USAGE }, { parseCommandArgs }, { reportError }, { nearest }, { UsageError }] = await Promise.all([
    import('./commands/index.js'),
    import('./command.js'),
    import('./errors.js'),
    import('./suggest.js'),
    import('./usage-error.js'),
  ]);
  if (name === undefined || name === '--help' || name === '-h' || name === 'help') {
    const out = name === undefined ? process.stderr : process.stdout;
    out.write(`${USAGE}\n`);
    return name === undefined ? EXIT.usage : EXIT.ok;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) {
    const suggestion = nearest(
      name,
      COMMANDS.map((c) => c.name),
    );
    const hint = suggestion === undefined ? '' : ` - did you mean \`${suggestion}\`?`;
    return reportError(
      new UsageError(`unknown command ${JSON.stringify(name)}${hint}`),
      json,
      suggestion === undefined ? USAGE : undefined,
    );
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
