import { NotDeadLetteredError, OperationNotFoundError } from '../../client/errors.js';
import type { SettleClient } from '../../client/client.js';
import { boolFlag, COMMON_HELP, intFlag, stringFlag, withClient, type Command, type CommandInput } from '../command.js';
import { confirm } from '../confirm.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderFields } from '../output.js';
import { createProgress } from '../progress.js';
import { deadLetterKeys, viewQuery } from '../queries.js';
import { UsageError } from '../usage-error.js';

export const redriveCommand: Command = {
  name: 'redrive',
  summary: 're-open a dead-lettered operation (or all of them) for more attempts',
  help: `Usage: pg-settle redrive <tenant> <key> [--attempts N] [--reason TEXT] [--database-url URL] [--json]
       pg-settle redrive --all [--tenant T] [--limit N] [--dry-run] [--yes] [--attempts N] [--reason TEXT] ...

Re-opens a dead-lettered operation (status failed, dead-lettered) as pending, keeping its key,
fingerprint and binding, with N more attempts. The audit row keeps the previous error and the
reason. Refused (exit 1, SE011) when the operation is not dead-lettered; SE010 when it does not
exist. A redrive runs nothing by itself: the next claim of the key does.

With --all, every dead letter (of one tenant with --tenant), oldest first, one settle.redrive
each, with a progress line on stderr. Asks first (a terminal) or needs --yes (no terminal).
Dead letters a colleague redrove or purged meanwhile are counted as skipped, not errors.

  --attempts N         attempts added to the spent budget (1-1000, default 1)
  --reason TEXT        why, kept in the audit trail (<= 1024 bytes; default: none)
  --all                redrive every dead letter instead of one <tenant> <key> (default: off)
  --tenant T           with --all: only this tenant's dead letters (default: every tenant)
  --limit N            with --all: at most N dead letters (1-1000000, default 100000)
  --dry-run            with --all: only count, redrive nothing (default: off)
  --yes                with --all: redrive without asking; required when stdin is not a terminal

${COMMON_HELP}`,
  flags: {
    attempts: { type: 'string' },
    reason: { type: 'string' },
    all: { type: 'boolean' },
    tenant: { type: 'string' },
    limit: { type: 'string' },
    'dry-run': { type: 'boolean' },
    yes: { type: 'boolean' },
  },
  positionals: ['tenant', 'key'],
  positionalsOptionalWith: 'all',
  async run(input) {
    const additionalAttempts = intFlag(input, 'attempts', 1, 1, 1000);
    const reason = stringFlag(input, 'reason');
    if (boolFlag(input, 'all')) return redriveAll(input, additionalAttempts, reason);
    for (const flag of ['tenant', 'limit', 'dry-run', 'yes']) {
      if (input.values[flag] !== undefined) throw new UsageError(`--${flag} goes with --all`);
    }
    const [tenant = '', key = ''] = input.positionals;
    return withClient(input, async (client) => {
      const operation = await client.redrive({
        tenant,
        key,
        additionalAttempts,
        ...(reason === undefined ? {} : { reason }),
      });
      if (input.json) {
        printJson({ ok: true, command: 'redrive', operation });
      } else {
        printText(`redriven: ${tenant} / ${key}`);
        printText(
          renderFields([
            ['status', operation.status],
            ['attempt', `${operation.attempt} of ${operation.maxAttempts}`],
            ['redrives', operation.redriveCount],
          ]),
        );
      }
      return EXIT.ok;
    });
  },
};

async function redriveAll(
  input: CommandInput,
  additionalAttempts: number,
  reason: string | undefined,
): Promise<number> {
  const tenant = stringFlag(input, 'tenant');
  const limit = intFlag(input, 'limit', 100_000, 1, 1_000_000);
  const scope = tenant === undefined ? 'every tenant' : `tenant ${JSON.stringify(tenant)}`;
  return withClient(input, async (client: SettleClient) => {
    const keys = await viewQuery(await client.getPool(), (pool) => deadLetterKeys(pool, tenant, limit));
    if (boolFlag(input, 'dry-run')) {
      if (input.json) printJson({ ok: true, command: 'redrive', dryRun: true, wouldRedrive: keys.length });
      else printText(`dry run: would redrive ${keys.length} dead letters of ${scope}; nothing changed`);
      return EXIT.ok;
    }
    if (keys.length === 0) {
      if (input.json) printJson({ ok: true, command: 'redrive', dryRun: false, redriven: 0, skipped: 0 });
      else printText(`no dead letters of ${scope}`);
      return EXIT.ok;
    }
    const go = await confirm(
      `redrive ${keys.length} dead letters of ${scope} with ${additionalAttempts} more attempt(s) each?`,
      {
        yes: boolFlag(input, 'yes'),
        command: 'redrive --all',
      },
    );
    if (!go) {
      if (input.json) printJson({ ok: false, command: 'redrive', aborted: true, redriven: 0 });
      else printText('aborted: nothing redriven');
      return EXIT.failure;
    }
    const progress = createProgress('redrive', { unit: 'dead letters' });
    let redriven = 0;
    let skipped = 0;
    for (const ref of keys) {
      try {
        await client.redrive({ ...ref, additionalAttempts, ...(reason === undefined ? {} : { reason }) });
        redriven += 1;
      } catch (error) {
        // Redriven by a colleague, or purged, since the list was read: nothing to do here.
        if (!(error instanceof NotDeadLetteredError || error instanceof OperationNotFoundError)) throw error;
        skipped += 1;
      }
      progress.update(redriven + skipped, keys.length, skipped === 0 ? undefined : `${skipped} skipped`);
    }
    progress.finish();
    if (input.json) printJson({ ok: true, command: 'redrive', dryRun: false, redriven, skipped });
    else
      printText(
        `redrove ${redriven} dead letters of ${scope}${skipped === 0 ? '' : ` (${skipped} skipped: no longer dead letters)`}`,
      );
    return EXIT.ok;
  });
}
