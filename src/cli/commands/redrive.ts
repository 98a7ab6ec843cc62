import { COMMON_HELP, intFlag, stringFlag, withClient, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderFields } from '../output.js';

export const redriveCommand: Command = {
  name: 'redrive',
  summary: 're-open a dead-lettered operation for more attempts',
  help: `Usage: pg-settle redrive <tenant> <key> [--attempts N] [--reason TEXT] [--database-url URL] [--json]

Re-opens a dead-lettered operation (status failed, dead-lettered) as pending, keeping its key,
fingerprint and binding, with N more attempts. The audit row keeps the previous error and the
reason. Refused (exit 1, SE011) when the operation is not dead-lettered; SE010 when it does not
exist.

  --attempts N         attempts added to the spent budget (1-1000, default 1)
  --reason TEXT        why, kept in the audit trail (<= 1024 bytes)

${COMMON_HELP}`,
  flags: { attempts: { type: 'string' }, reason: { type: 'string' } },
  positionals: ['tenant', 'key'],
  async run(input) {
    const [tenant = '', key = ''] = input.positionals;
    const additionalAttempts = intFlag(input, 'attempts', 1, 1, 1000);
    const reason = stringFlag(input, 'reason');
    return withClient(input, async (client) => {
      const operation = await client.redrive({ tenant, key, additionalAttempts, ...(reason === undefined ? {} : { reason }) });
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
