/**
 * An AbortController made when its signal is first read: most effects never read
 * `context.signal`, and making an AbortController (an EventTarget) cost more CPU than the rest
 * of run()'s own work. An abort before that is kept and applied to the controller it then makes,
 * so the signal answers exactly as an eager controller's would.
 */
export class LazyAbortController {
  private controller: AbortController | undefined;
  private aborted: { readonly reason: unknown } | undefined;

  get signal(): AbortSignal {
    if (this.controller === undefined) {
      this.controller = new AbortController();
      if (this.aborted !== undefined) this.controller.abort(this.aborted.reason);
    }
    return this.controller.signal;
  }

  abort(reason?: unknown): void {
    if (this.controller !== undefined) this.controller.abort(reason);
    else this.aborted ??= { reason };
  }
}
