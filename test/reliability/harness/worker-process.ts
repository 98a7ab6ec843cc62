/**
 * A real worker process for the crash and pause faults:
 *   node --import tsx test/reliability/harness/worker-process.ts <dbUrl> <tenant> <key>
 * Claims (tenant, key) through the typed client as settle_app, prints the answer as one JSON
 * line, then obeys JSON commands on stdin, one per line ({"op":"heartbeat"|"fail"|"unknown"|
 * "complete","result"?:...}), printing one JSON line per answer. The parent kills or pauses it.
 */
import { createInterface } from 'node:readline';
import { createSettleClient } from '../../../src/client/client.js';
import { roleUrl } from './app-url.js';
import { createClientDriver } from './client-driver.js';
import type { Ticket } from './driver.js';
import { WORKER_BINDING, workerRequest, type WorkerCommand } from './worker-protocol.js';

const [url, tenant, key] = process.argv.slice(2);
if (url === undefined || tenant === undefined || key === undefined) {
  console.error('usage: worker-process.ts <dbUrl> <tenant> <key>');
  process.exit(2);
}
const driver = createClientDriver(
  createSettleClient({ connectionString: roleUrl(url, `reliability-worker-${process.pid}`), poolSize: 1 }),
);
const say = (line: unknown): void => {
  process.stdout.write(`${JSON.stringify(line)}\n`);
};

const claimed = await driver.claim({
  tenant,
  key,
  request: workerRequest(key),
  binding: WORKER_BINDING,
  worker: `pid-${process.pid}`,
});
say(claimed);
const ticket: Ticket | undefined = claimed.ticket;

for await (const line of createInterface({ input: process.stdin })) {
  const command = JSON.parse(line) as WorkerCommand;
  if (command.op === 'exit' || ticket === undefined) break;
  try {
    if (command.op === 'heartbeat') say(await driver.heartbeat(ticket));
    if (command.op === 'fail') say(await driver.fail(ticket, { code: 'worker_failed' }, true));
    if (command.op === 'unknown') say(await driver.reportUnknown(ticket));
    if (command.op === 'complete') say(await driver.complete(ticket, command.result ?? null));
  } catch (error) {
    say({ outcome: 'error', error: String(error) });
  }
}
await driver.end();
