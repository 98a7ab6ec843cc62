/**
 * Canonical text of a JSON value for byte-for-byte comparison in the checker: object keys
 * sorted (as jsonb stores them), no whitespace, numbers as JavaScript prints them. Two values
 * read back from jsonb are equal exactly when their canonical texts are equal.
 */
export function canonicalJson(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? String(value);
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.keys(value)
    .sort()
    .map((key) => `${JSON.stringify(key)}:${canonicalJson((value as Record<string, unknown>)[key])}`);
  return `{${entries.join(',')}}`;
}

/** Whether two JSON values are the same value (key order ignored, as in jsonb). */
export function sameJson(a: unknown, b: unknown): boolean {
  return canonicalJson(a) === canonicalJson(b);
}
