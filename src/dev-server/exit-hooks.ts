/**
 * Synchronous last-chance cleanup when the Node process goes away without calling stop():
 * on 'exit' and on SIGINT/SIGTERM/SIGHUP. When our handler is the only listener for a signal,
 * the signal is re-raised after cleanup so the default behaviour (the process dies) is kept.
 */
const hooks = new Set<() => void>();
let installed = false;

export function onProcessExit(hook: () => void): () => void {
  install();
  hooks.add(hook);
  return () => hooks.delete(hook);
}

function runHooks(): void {
  for (const hook of [...hooks]) {
    hooks.delete(hook);
    try {
      hook();
    } catch {
      // best effort: the process is going away
    }
  }
}

function install(): void {
  if (installed) return;
  installed = true;
  process.on('exit', runHooks);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    const handler = (): void => {
      runHooks();
      if (process.listenerCount(signal) === 1) {
        process.removeListener(signal, handler);
        process.kill(process.pid, signal);
      }
    };
    process.on(signal, handler);
  }
}
