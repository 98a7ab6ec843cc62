import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import type { ClaimAnswer } from './driver.js';
import type { Answer } from './history.js';
import type { WorkerCommand } from './worker-protocol.js';

const SCRIPT = fileURLToPath(new URL('./worker-process.ts', import.meta.url));

/** Parent side of worker-process.ts: a real OS process the test can SIGKILL or SIGSTOP. */
export class ChildWorker {
  readonly child: ChildProcess;
  private readonly lines: string[] = [];
  private waiting: ((line: string) => void) | undefined;
  private exited = false;

  constructor(url: string, tenant: string, key: string) {
    this.child = spawn(process.execPath, ['--import', 'tsx', SCRIPT, url, tenant, key], {
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    this.child.on('exit', () => {
      this.exited = true;
    });
    createInterface({ input: this.child.stdout! }).on('line', (line) => {
      const resolve = this.waiting;
      this.waiting = undefined;
      if (resolve === undefined) this.lines.push(line);
      else resolve(line);
    });
  }

  /** The next JSON line the worker prints (its claim, then one per command). */
  async next<T = Answer>(timeoutMs = 30_000): Promise<T> {
    const line =
      this.lines.shift() ??
      (await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(
          () => reject(new Error(`worker ${this.child.pid} printed nothing in ${timeoutMs} ms`)),
          timeoutMs,
        );
        this.waiting = (l) => {
          clearTimeout(timer);
          resolve(l);
        };
      }));
    return JSON.parse(line) as T;
  }

  claimed(): Promise<ClaimAnswer> {
    return this.next<ClaimAnswer>();
  }

  async send(command: WorkerCommand): Promise<Answer> {
    this.child.stdin!.write(`${JSON.stringify(command)}\n`);
    return this.next();
  }

  signal(signal: NodeJS.Signals): void {
    if (!this.child.kill(signal)) throw new Error(`could not send ${signal} to ${this.child.pid}`);
  }

  /** Resolves once the process is gone (after SIGKILL or exit). */
  async gone(): Promise<void> {
    if (this.exited) return;
    await new Promise((resolve) => this.child.once('exit', resolve));
  }

  async stop(): Promise<void> {
    if (this.exited) return;
    this.child.kill('SIGKILL');
    await this.gone();
  }
}
