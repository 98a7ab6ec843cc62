/**
 * A bounded pool of async workers. Tasks wait in a ready queue (continuations first, then new
 * operations from the source) and run at most `concurrency` at a time; a task can schedule a
 * continuation for later (a retry after a lease lapses) or after a promise settles (a stale
 * attempt waking up once the operation has settled elsewhere) without holding a worker.
 */
export type Task = () => Promise<void>;

export class TaskQueue {
  private readonly ready: Task[] = [];
  private running = 0;
  private waiting = 0;
  private sourceDone = false;
  private idle: (() => void) | undefined;

  constructor(
    private readonly concurrency: number,
    private readonly source: () => Task | undefined,
    private readonly onError: (error: unknown) => void,
  ) {}

  /** Runs until the source is exhausted and no task is queued, delayed or running. */
  run(): Promise<void> {
    return new Promise((resolve) => {
      this.idle = resolve;
      this.pump();
    });
  }

  /** Queue a continuation now (ahead of new operations). */
  push(task: Task): void {
    this.ready.push(task);
    this.pump();
  }

  /** Queue a continuation after `delayMs`. */
  later(delayMs: number, task: Task): void {
    this.waiting += 1;
    setTimeout(
      () => {
        this.waiting -= 1;
        this.push(task);
      },
      Math.max(0, delayMs),
    );
  }

  /** Queue a continuation once `promise` settles, or after `timeoutMs` at the latest. */
  after(promise: Promise<unknown>, timeoutMs: number, task: Task): void {
    this.waiting += 1;
    let fired = false;
    const fire = (): void => {
      if (fired) return;
      fired = true;
      clearTimeout(timer);
      this.waiting -= 1;
      this.push(task);
    };
    const timer = setTimeout(fire, timeoutMs);
    promise.then(fire, fire);
  }

  private next(): Task | undefined {
    const continuation = this.ready.shift();
    if (continuation !== undefined || this.sourceDone) return continuation;
    const task = this.source();
    if (task === undefined) this.sourceDone = true;
    return task;
  }

  private pump(): void {
    while (this.running < this.concurrency) {
      const task = this.next();
      if (task === undefined) break;
      this.running += 1;
      void task()
        .catch(this.onError)
        .finally(() => {
          this.running -= 1;
          this.pump();
        });
    }
    if (this.running === 0 && this.waiting === 0 && this.ready.length === 0 && this.sourceDone) {
      const idle = this.idle;
      this.idle = undefined;
      idle?.();
    }
  }
}
