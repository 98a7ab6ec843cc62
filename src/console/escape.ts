// The console's one escaping function and the template tag built on it. Every string a caller
// chose (tenant, key, principal, request, result, error, reason, evidence, worker, consumer
// name) reaches a page only through `escapeHtml`, via `html`: interpolations are escaped unless
// they are `Html` values the console built itself. Attribute values are always double-quoted in
// the templates, so escaping `"` and `'` as well as `<`, `>` and `&` covers text and attributes.

const ENTITIES: Readonly<Record<string, string>> = {
  '&': '&amp;',
  '<': '&lt;',
  '>': '&gt;',
  '"': '&quot;',
  "'": '&#39;',
};

/** Text (or any value, shown as text) safe in HTML text and in a double- or single-quoted attribute. */
export function escapeHtml(value: unknown): string {
  const text = value === null || value === undefined ? '' : typeof value === 'string' ? value : String(value);
  return text.replace(/[&<>"']/g, (c) => ENTITIES[c] ?? c);
}

/** HTML the console wrote itself (a template's output): interpolated into another template as is. */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

type Part = Html | string | number | bigint | boolean | null | undefined | readonly Part[];

function render(part: Part): string {
  if (part instanceof Html) return part.text;
  if (Array.isArray(part)) return part.map(render).join('');
  if (part === null || part === undefined || part === false) return '';
  return escapeHtml(part);
}

/** A template whose interpolations are escaped (arrays are joined; Html is kept as is). */
export function html(strings: TemplateStringsArray, ...parts: readonly Part[]): Html {
  let out = strings[0] ?? '';
  parts.forEach((part, i) => {
    out += render(part) + (strings[i + 1] ?? '');
  });
  return new Html(out);
}

/** A URL path with query parameters, each value percent-encoded (never a caller-chosen scheme). */
export function href(path: string, query: Readonly<Record<string, string | number | undefined>> = {}): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query))
    if (value !== undefined && value !== '') params.set(name, String(value));
  const text = params.toString();
  return text === '' ? path : `${path}?${text}`;
}

/** JSON shown as text (pretty-printed; a string stays a JSON string, so quotes show what it is). */
export function jsonText(value: unknown): string {
  if (value === null || value === undefined) return '';
  return JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v), 2);
}
