// One HTTP scenario of bench/http.ts against the Express example app of a given checkout, with the
// process CPU per request: an A/B of the middleware between two builds, one run per build,
// alternated by the caller.
//   npx tsx bench/ab/http-cpu.ts [first|replay|plain] [clients 16] [seconds 3] [checkout root: this one]
// `checkout root` holds src/ and examples/ of the other build (e.g. `git archive <commit> src
// examples | tar -x -C bench/out/base`). Prints requests/s and CPU (user + system) per request
// over the measured window, after a 1.5 s warm-up; every answer must be 201.
import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { Server } from 'node:http';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { startBenchServer } from '../lib/database.js';

const [scenario = 'first', clientsArg = '16', secondsArg = '3', rootArg] = process.argv.slice(2);
if (!['first', 'replay', 'plain'].includes(scenario)) throw new Error('scenario: first, replay or plain');
const root = path.resolve(rootArg ?? path.join(path.dirname(new URL(import.meta.url).pathname), '../..'));
const load = async (file: string) => import(pathToFileURL(path.join(root, file)).href);
const { createApp } = await load('examples/http/express-app.ts');
const { createSettleClient } = await load('src/index.ts');
const clients = Number(clientsArg);
const server = await startBenchServer(() => {});
const db = await server.createRunDatabase('http_cpu');
const settle = createSettleClient({ connectionString: db.url, poolSize: Math.min(clients + 2, 20) });
const app: Server = createApp(settle, { idempotent: scenario !== 'plain' }).listen(0, '127.0.0.1');
try {
  await new Promise((resolve) => app.once('listening', resolve));
  const url = `http://127.0.0.1:${(app.address() as AddressInfo).port}/payments`;
  const post = (key: string | null) =>
    fetch(url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        authorization: 'Bearer acme:bench',
        ...(key === null ? {} : { 'idempotency-key': `"${key}"` }),
      },
      body: JSON.stringify({ amount: '19.99' }),
    });
  const replayKeys = Array.from({ length: 500 }, () => randomUUID());
  if (scenario === 'replay') {
    for (let i = 0; i < replayKeys.length; i += clients)
      await Promise.all(replayKeys.slice(i, i + clients).map(async (k) => (await post(k)).arrayBuffer()));
  }
  let next = 0;
  const drive = async (ms: number): Promise<number> => {
    let requests = 0;
    const deadline = performance.now() + ms;
    await Promise.all(
      Array.from({ length: clients }, async () => {
        while (performance.now() < deadline) {
          const key =
            scenario === 'plain' ? null : scenario === 'first' ? randomUUID() : replayKeys[next++ % replayKeys.length]!;
          const response = await post(key);
          await response.arrayBuffer();
          if (response.status !== 201) throw new Error(`${scenario}: answered ${response.status}`);
          requests += 1;
        }
      }),
    );
    return requests;
  };
  await drive(1500);
  const cpu = process.cpuUsage();
  const started = performance.now();
  const requests = await drive(Number(secondsArg) * 1000);
  const used = process.cpuUsage(cpu);
  const elapsed = (performance.now() - started) / 1000;
  console.log(
    `${scenario} ${root}: ${(requests / elapsed).toFixed(0)} req/s, ${((used.user + used.system) / requests).toFixed(0)} us CPU/request`,
  );
} finally {
  await new Promise((resolve) => app.close(resolve));
  await settle.end();
  await db.drop();
  await server.stop();
}
