import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { SettleClient } from '../client/client.js';
import { createSettleClient } from '../client/client.js';
import { openDatabase, type CommandDatabase } from './database.js';
import { nearest } from './suggest.js';
import { UnknownFlagError, UsageError } from './usage-error.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Flags every subcommand accepts. */
export const COMMON_FLAGS = {
  help: { type: 'boolean', short: 'h' },
  json: { type: 'boolean' },
  'database-url': { type: 'string' },
} as const satisfies Options;

export const COMMON_HELP = `Common flags:
  --database-url URL   PostgreSQL connection string (default: $DATABASE_URL; one of them is
                       required: only \`simulate\` ever starts a database of its own)
  --json               print one JSON document on stdout instead of text (default: off;
                       progress and prompts stay on stderr)
  -h, --help           show this help`;

export interface CommandInput {
  readonly values: Record<string, string | boolean | undefined>;
  readonly positionals: readonly string[];
  readonly json: boolean;
}

export interface Command {
  readonly name: string;
  readonly summary: string;
  /** Full help text (usage line, description, flags). */
  readonly help: string;
  readonly flags: Options;
  /** Exact number of positionals required. */
  readonly positionals: readonly string[];
  /** A boolean flag under which the command takes no positionals instead (redrive --all). */
  readonly positionalsOptionalWith?: string;
  /** The command checks its positionals itself (feed, feed reset <consumer>). */
  readonly variadicPositionals?: boolean;
  run(input: CommandInput): Promise<number>;
}

export function parseCommandArgs(command: Command, argv: readonly string[]): CommandInput & { readonly help: boolean } {
  let parsed;
  const options = { ...COMMON_FLAGS, ...command.flags };
  try {
    parsed = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
  } catch (error) {
    throw flagError((error as Error).message, command.name, Object.keys(options));
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  const help = values.help === true;
  // The flag that stands for the positionals: a boolean (redrive --all) or a value (resolve --file).
  const alternativeValue =
    command.positionalsOptionalWith === undefined ? undefined : values[command.positionalsOptionalWith];
  const alternative = alternativeValue !== undefined && alternativeValue !== false;
  if (alternative && parsed.positionals.length !== 0) {
    throw new UsageError(
      `${command.name} --${command.positionalsOptionalWith} takes no arguments (got ${parsed.positionals.length})`,
    );
  }
  if (
    !help &&
    !alternative &&
    command.variadicPositionals !== true &&
    parsed.positionals.length !== command.positionals.length
  ) {
    const expected =
      command.positionals.length === 0 ? 'no arguments' : command.positionals.map((p) => `<${p}>`).join(' ');
    throw new UsageError(`${command.name} takes ${expected} (got ${parsed.positionals.length})`);
  }
  return { values, positionals: parsed.positionals, json: values.json === true, help };
}

/** A whole-number flag within [min, max], or the default. */
export function intFlag(input: CommandInput, name: string, fallback: number, min: number, max: number): number {
  const text = input.values[name];
  if (typeof text !== 'string') return fallback;
  if (!/^\d+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new UsageError(`--${name} must be a whole number between ${min} and ${max} (got ${JSON.stringify(text)})`);
  }
  return Number(text);
}

export function stringFlag(input: CommandInput, name: string): string | undefined {
  const value = input.values[name];
  return typeof value === 'string' ? value : undefined;
}

/**
 * Node's parser error as one line: "Unknown option '--older-then'. To specify a positional
 * argument ..." becomes "purge has no flag --older-then - did you mean --older-than?".
 */
function flagError(message: string, command: string, flags: readonly string[]): UsageError {
  const unknown = /Unknown option '(-{1,2}[^'=]+)'/.exec(message)?.[1];
  if (unknown === undefined) return new UsageError(message);
  const suggestion = nearest(unknown.replace(/^-+/, ''), flags);
  const hint =
    suggestion === undefined
      ? ` (\`pg-settle ${command} --help\` lists its flags)`
      : ` - did you mean --${suggestion}?`;
  return new UnknownFlagError(`${command} has no flag ${unknown}${hint}`);
}

/** A boolean flag (`--yes`, `--dry-run`): true only when given. */
export function boolFlag(input: CommandInput, name: string): boolean {
  return input.values[name] === true;
}

/**
 * Opens the command's database (given by --database-url or DATABASE_URL: never a throwaway one)
 * and a client on it, runs `fn`, and always cleans up.
 */
export async function withClient<T>(
  input: CommandInput,
  fn: (client: SettleClient, db: CommandDatabase) => Promise<T>,
): Promise<T> {
  const db = await openDatabase(stringFlag(input, 'database-url'));
  const client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  try {
    return await fn(client, db);
  } finally {
    await client.end().catch(() => {});
    await db.close();
  }
}
