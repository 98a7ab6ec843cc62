import type { Json } from './types.js';

/** A problem found in a would-be JSON value, with the path to it. */
export interface JsonProblem {
  readonly path: (string | number)[];
  readonly message: string;
}

/**
 * Finds values that JSON.stringify would silently change or drop (NaN/Infinity become null,
 * undefined and functions vanish, bigint throws, Dates and class instances become something
 * else) and values PostgreSQL's jsonb refuses (U+0000, lone surrogates). Returns the first
 * problem, or null when `value` is plain JSON.
 */
export function findJsonProblem(value: unknown): JsonProblem | null {
  const problem = walk(value, [], new Set());
  return problem === null ? null : { path: problem.path.slice(), message: problem.message };
}

// `path` is one stack shared by the whole walk (pushed and popped, copied only for a problem).
function walk(value: unknown, path: (string | number)[], ancestors: Set<object>): JsonProblem | null {
  switch (typeof value) {
    case 'string':
      return checkString(value, path, 'string');
    case 'boolean':
      return null;
    case 'number':
      return Number.isFinite(value) ? null : { path, message: `number must be finite (got ${String(value)})` };
    case 'object':
      break;
    default:
      return { path, message: `${typeof value} is not a JSON value` };
  }
  if (value === null) return null;
  if (ancestors.has(value)) return { path, message: 'circular reference' };
  ancestors.add(value);
  try {
    if (Array.isArray(value)) {
      for (let i = 0; i < value.length; i += 1) {
        path.push(i);
        const problem =
          i in value ? walk(value[i], path, ancestors) : { path, message: 'sparse array hole is not a JSON value' };
        if (problem !== null) return problem;
        path.pop();
      }
      return null;
    }
    const proto: unknown = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      return {
        path,
        message: 'only plain objects and arrays are JSON (convert Dates, Maps and class instances first)',
      };
    }
    if (Object.getOwnPropertySymbols(value).length > 0) {
      return { path, message: 'symbol keys are not JSON' };
    }
    for (const key in value) {
      if (!Object.hasOwn(value, key)) continue;
      path.push(key);
      const problem =
        checkString(key, path, 'object key') ?? walk((value as Record<string, unknown>)[key], path, ancestors);
      if (problem !== null) return problem;
      path.pop();
    }
    return null;
  } finally {
    ancestors.delete(value);
  }
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

function checkString(value: string, path: (string | number)[], what: string): JsonProblem | null {
  if (isPlainText(value)) return null;
  if (value.includes('\u0000')) return { path, message: `${what} must not contain U+0000 (jsonb cannot store it)` };
  if (LONE_SURROGATE.test(value)) return { path, message: `${what} must be well-formed Unicode (no lone surrogates)` };
  return null;
}

/**
 * True when `value` is printable ASCII without `"` or `\`: no U+0000, no surrogates, and
 * JSON.stringify only adds the two quotes. Most keys and values are; the checks above and
 * below take the general path for the others.
 */
function isPlainText(value: string): boolean {
  for (let i = 0; i < value.length; i += 1) {
    const c = value.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return false;
  }
  return true;
}

/** Bytes of `value` as a JSON string (quotes and escapes included). */
const jsonStringBytes = (value: string): number =>
  isPlainText(value) ? value.length + 2 : Buffer.byteLength(JSON.stringify(value));

/**
 * Byte length of `value` as PostgreSQL renders jsonb as text (`octet_length(value::text)`, the
 * measure the engine's size limits use): keys sorted, `": "` and `", "` separators, numbers in
 * plain decimal notation. `value` must be plain JSON (see findJsonProblem).
 */
export function jsonbTextLength(value: Json): number {
  switch (typeof value) {
    case 'string':
      return jsonStringBytes(value);
    case 'number':
      return plainDecimal(value).length;
    case 'boolean':
      return value ? 4 : 5;
    default:
      break;
  }
  if (value === null) return 4;
  if (Array.isArray(value)) {
    let items = 0;
    for (const item of value) items += jsonbTextLength(item);
    return 2 + items + Math.max(0, value.length - 1) * 2;
  }
  const keys = Object.keys(value);
  let body = 0;
  for (const key of keys) body += jsonStringBytes(key) + 2 + jsonbTextLength(value[key] as Json);
  return 2 + body + Math.max(0, keys.length - 1) * 2;
}

/** 1e+21 -> "1000000000000000000000", 1.5e-7 -> "0.00000015", -0 -> "0" (as numeric prints). */
function plainDecimal(n: number): string {
  const text = String(n === 0 ? 0 : n);
  if (!text.includes('e')) return text;
  const match = /^(-?)(\d+)(?:\.(\d+))?e([+-]\d+)$/.exec(text);
  if (match === null) return text;
  const [, sign = '', whole = '', fraction = '', exponentText = '0'] = match;
  const digits = whole + fraction;
  const point = whole.length + Number(exponentText);
  if (point <= 0) return `${sign}0.${'0'.repeat(-point)}${digits}`;
  if (point >= digits.length) return sign + digits + '0'.repeat(point - digits.length);
  return `${sign}${digits.slice(0, point)}.${digits.slice(point)}`;
}
