import { createInterface } from 'node:readline/promises';
import { UsageError } from './usage-error.js';

/**
 * Asks before destructive or bulk work. `--yes` answers for the operator; without it a terminal
 * is asked on stderr (only `y` or `yes` proceeds) and a non-terminal stdin (cron, CI, a pipe)
 * is refused with a usage error (exit 2), so a script never deletes by accident.
 */
export async function confirm(
  question: string,
  opts: { readonly yes: boolean; readonly command: string },
): Promise<boolean> {
  if (opts.yes) return true;
  if (process.stdin.isTTY !== true) {
    throw new UsageError(
      `${question} - refused: stdin is not a terminal, so nobody can confirm; pass --yes to ${opts.command} without asking (or --dry-run to only count)`,
    );
  }
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await rl.question(`${question} [y/N] `);
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}
