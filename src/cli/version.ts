import { readFileSync } from 'node:fs';

/**
 * The package's version, read from its package.json: two levels up from src/cli (a checkout,
 * tsx) or three from dist/src/cli (the built package).
 */
export function packageVersion(): string {
  for (const relative of ['../../package.json', '../../../package.json']) {
    try {
      const parsed = JSON.parse(readFileSync(new URL(relative, import.meta.url), 'utf8')) as {
        name?: unknown;
        version?: unknown;
      };
      if (parsed.name === 'pg-settle' && typeof parsed.version === 'string') return parsed.version;
    } catch {
      // not there: try the next level
    }
  }
  return 'unknown';
}
