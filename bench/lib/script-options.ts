import path from 'node:path';

/**
 * The flags of the A/B scripts (client-ab, client-micro, client-ratio, http-ab, http-micro):
 * `--name value` pairs read from process.argv.
 */
export function option(name: string, fallback: string): string {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 ? (process.argv[at + 1] ?? fallback) : fallback;
}

/** `--baseline <checkout root>` resolved, or undefined when not given. */
export function baselineRoot(): string | undefined {
  return process.argv.includes('--baseline') ? path.resolve(option('baseline', '')) : undefined;
}

/** This checkout's root (the directory above bench/). */
export const REPO_ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '../..');
