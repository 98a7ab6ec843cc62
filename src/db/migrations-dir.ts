import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const PACKAGE_NAME = 'pg-settle';

/**
 * The package's `sql/migrations` directory, found by walking up from this module: works from
 * `src/db/` (tsx, vitest) and from `dist/src/db/` (after `npm run build`), and from an installed
 * copy under node_modules (the `sql` folder ships in the package). Stops at the package root.
 */
export function defaultMigrationsDir(fromUrl: string = import.meta.url): string {
  return packageSqlDir('migrations', fromUrl);
}

/** The package's `sql/<name>` directory (e.g. `citus`), found the same way as sql/migrations. */
export function packageSqlDir(name: string, fromUrl: string = import.meta.url): string {
  const start = path.dirname(fileURLToPath(fromUrl));
  let dir = start;
  for (;;) {
    const candidate = path.join(dir, 'sql', name);
    if (existsSync(candidate) && statSync(candidate).isDirectory()) return candidate;
    const parent = path.dirname(dir);
    if (isPackageRoot(dir) || parent === dir) break;
    dir = parent;
  }
  throw new Error(`No sql/${name} directory found walking up from ${start} to the ${PACKAGE_NAME} package root`);
}

function isPackageRoot(dir: string): boolean {
  const manifest = path.join(dir, 'package.json');
  if (!existsSync(manifest)) return false;
  try {
    return (JSON.parse(readFileSync(manifest, 'utf8')) as { name?: unknown }).name === PACKAGE_NAME;
  } catch {
    return false;
  }
}
