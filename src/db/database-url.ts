/**
 * Small helpers for PostgreSQL connection strings and identifiers.
 */

/**
 * Returns `url` with its database name replaced by `database`, keeping user, password, host,
 * port and query parameters (such as `?host=/socket/dir` or `sslmode=...`).
 */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:') {
    throw new Error(`withDatabase: not a postgres:// or postgresql:// URL: ${redactPassword(url)}`);
  }
  parsed.pathname = `/${encodeURIComponent(database)}`;
  return parsed.toString();
}

/** The database name in a connection string (`postgres` when the URL names none). */
export function databaseOf(url: string): string {
  const name = decodeURIComponent(new URL(url).pathname.replace(/^\//, ''));
  return name === '' ? 'postgres' : name;
}

/** Quotes an SQL identifier the way `quote_ident()` / `format('%I')` do, always with quotes. */
export function quoteIdent(name: string): string {
  if (name.length === 0) throw new Error('quoteIdent: empty identifier');
  if (name.includes('\u0000')) throw new Error('quoteIdent: identifier contains a NUL byte');
  return `"${name.replaceAll('"', '""')}"`;
}

/** The URL with any password replaced by `***`, for log and error messages. */
export function redactPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString();
  } catch {
    return '<unparseable connection string>';
  }
}
