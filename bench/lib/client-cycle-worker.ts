import { parentPort, workerData } from 'node:worker_threads';
import { openCycle } from './client-cycle.js';
import type { RunLength } from './types.js';

// One thread of the `client` driver with threads > 1 (bench/lib/client-cycle.ts): opens its client,
// says ready, runs its share of the workers on each `go` (answering the latencies), and closes
// its client on `end`.
const { url, clients, preparedStatements, clientModule } = workerData as {
  url: string;
  clients: number;
  preparedStatements?: boolean;
  clientModule?: string;
};
const port = parentPort;
if (port === null) throw new Error('client-cycle-worker runs as a worker thread');
const answerError = (error: unknown): void => {
  port.postMessage({ error: error instanceof Error ? (error.stack ?? error.message) : String(error) });
};
try {
  const cycle = await openCycle(url, clients, {
    ...(preparedStatements === undefined ? {} : { preparedStatements }),
    ...(clientModule === undefined ? {} : { clientModule }),
  });
  port.on('message', (message: { go: RunLength } | { end: true }) => {
    if ('go' in message) cycle.go(message.go).then((run) => port.postMessage(run), answerError);
    else cycle.end().then(() => port.postMessage({ ended: true }), answerError);
  });
  port.postMessage({ ready: true });
} catch (error) {
  answerError(error);
}
