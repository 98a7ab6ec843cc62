import { COMMON_HELP, withClient, type Command } from '../command.js';
import { EXIT } from '../exit-codes.js';
import { printJson, printText, renderFields, renderTable } from '../output.js';
import { KEY_PREFIX_HELP, operationNotFound, storedKeyOf } from '../stored-key.js';

export const inspectCommand: Command = {
  name: 'inspect',
  summary: 'show one operation: canonical record, attempts, audit trail',
  help: `Usage: pg-settle inspect <tenant> <key> [--key-prefix PREFIX] [--database-url URL] [--json]

Shows the canonical record of (tenant, key), every attempt with its own settlement, and the
audit trail in audit_id order. Exit code 1 when the operation does not exist.

${KEY_PREFIX_HELP}

${COMMON_HELP}`,
  flags: { 'key-prefix': { type: 'string' } },
  positionals: ['tenant', 'key'],
  async run(input) {
    const [tenant = ''] = input.positionals;
    const key = storedKeyOf(input, input.positionals[1] ?? '');
    return withClient(input, async (client) => {
      const operation = await client.inspect({ tenant, key });
      if (operation === null) throw operationNotFound(tenant, key, input);
      const [attempts, audit] = await Promise.all([client.attempts({ tenant, key }), client.auditLog({ tenant, key })]);
      if (input.json) {
        printJson({ ok: true, command: 'inspect', operation, attempts, audit });
        return EXIT.ok;
      }
      printText(
        renderFields([
          ['tenant', operation.tenant],
          ['key', operation.key],
          ['status', `${operation.status} (rank ${operation.statusRank})`],
          ['attempt', `${operation.attempt} of ${operation.maxAttempts}`],
          ['in flight', operation.inFlight],
          ['lease expires', operation.leaseExpiresAt],
          ['settled attempt', operation.settledAttempt],
          ['settled at', operation.settledAt],
          ['result', operation.result],
          ['error', operation.error],
          [
            'dead-lettered',
            operation.deadLetteredAt === null
              ? null
              : `${operation.deadLetteredAt.toISOString()} (${operation.deadLetterReason ?? 'no reason'})`,
          ],
          ['redrives', operation.redriveCount],
          ['fingerprint', operation.fingerprint],
          ['principal', operation.principal],
          ['scopes', operation.scopes.join(', ')],
          ['binding gen.', operation.bindingGeneration],
          ['request', operation.request],
          ['created', operation.createdAt],
          ['updated', operation.updatedAt],
        ]),
      );
      printText('\nattempts');
      printText(
        renderTable(
          ['attempt', 'worker', 'claimed', 'ended', 'end reason', 'observation', 'settled', 'error', 'late result'],
          attempts.map((a) => [
            a.attempt,
            a.worker,
            a.claimedAt,
            a.endedAt,
            a.endReason,
            a.observation,
            a.settled,
            a.error,
            a.lateResult,
          ]),
        ),
      );
      printText('\naudit trail');
      printText(
        renderTable(
          ['audit_id', 'at', 'event', 'outcome', 'attempt', 'before', 'after', 'actor', 'detail'],
          audit.map((r) => [
            r.auditId,
            r.at,
            r.event,
            r.outcome,
            r.attempt,
            r.statusBefore,
            r.statusAfter,
            r.actor,
            r.detail,
          ]),
        ),
      );
      return EXIT.ok;
    });
  },
};
