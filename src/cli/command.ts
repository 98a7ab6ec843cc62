import { parseArgs, type ParseArgsConfig } from 'node:util';
import type { SettleClient } from '../client/client.js';
import { createSettleClient } from '../client/client.js';
import { openDatabase, type CommandDatabase } from './database.js';
import { UsageError } from './usage-error.js';

type Options = NonNullable<ParseArgsConfig['options']>;

/** Flags every subcommand accepts. */
export const COMMON_FLAGS = {
  help: { type: 'boolean', short: 'h' },
  json: { type: 'boolean' },
  'database-url': { type: 'string' },
} as const satisfies Options;

export const COMMON_HELP = `Common flags:
  --database-url URL   PostgreSQL connection string (default: $DATABASE_URL; with neither, a
                       throwaway PostgreSQL is started, migrated, and deleted on exit)
  --json               print one JSON document on stdout instead of text
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
  run(input: CommandInput): Promise<number>;
}

export function parseCommandArgs(command: Command, argv: readonly string[]): CommandInput & { readonly help: boolean } {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options: { ...COMMON_FLAGS, ...command.flags }, allowPositionals: true, strict: true });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  const help = values.help === true;
  if (!help && parsed.positionals.length !== command.positionals.length) {
    const expected = command.positionals.length === 0 ? 'no arguments' : command.positionals.map((p) => `<${p}>`).join(' ');
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

/** Opens the command's database and a client on it, runs `fn`, and always cleans up. */
export async function withClient<T>(input: CommandInput, fn: (client: SettleClient, db: CommandDatabase) => Promise<T>): Promise<T> {
  const db = await openDatabase(stringFlag(input, 'database-url'));
  const client = createSettleClient({ connectionString: db.url, poolSize: 2 });
  try {
    return await fn(client, db);
  } finally {
    await client.end().catch(() => {});
    await db.close();
  }
}
