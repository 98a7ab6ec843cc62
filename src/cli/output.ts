/**
 * Output helpers: one JSON document on stdout with --json, plain tables otherwise.
 */

/** JSON text with bigints as numbers (strings when beyond 2^53) and Dates as ISO strings. */
export function toJsonText(value: unknown): string {
  return JSON.stringify(
    value,
    (_key, v: unknown) => {
      if (typeof v === 'bigint')
        return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
      return v;
    },
    2,
  );
}

export function printJson(value: unknown): void {
  process.stdout.write(`${toJsonText(value)}\n`);
}

/** A cell as text: JSON values compact, Dates ISO, null as '-'. */
export function cell(value: unknown): string {
  if (value === null || value === undefined) return '-';
  if (value instanceof Date) return value.toISOString();
  if (typeof value === 'object') return toJsonText(value).replace(/\s*\n\s*/g, ' ');
  return String(value);
}

/** A plain-text table: a header row, a rule, then rows; columns padded to their widest cell. */
export function renderTable(headers: readonly string[], rows: readonly (readonly unknown[])[]): string {
  const text = rows.map((row) => row.map(cell));
  const widths = headers.map((header, i) => Math.max(header.length, ...text.map((row) => row[i]?.length ?? 0)));
  const line = (cells: readonly string[]): string =>
    cells
      .map((c, i) => c.padEnd(widths[i] ?? 0))
      .join('  ')
      .trimEnd();
  return [line(headers), line(widths.map((w) => '-'.repeat(w))), ...text.map(line)].join('\n');
}

/** `key: value` lines, keys aligned. */
export function renderFields(fields: readonly (readonly [string, unknown])[]): string {
  const width = Math.max(...fields.map(([k]) => k.length));
  return fields.map(([k, v]) => `${k.padEnd(width)}  ${cell(v)}`).join('\n');
}

export function printText(text: string): void {
  process.stdout.write(`${text}\n`);
}
