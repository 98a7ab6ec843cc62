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

// Characters that do not show themselves: controls, format characters (zero-width, bidi
// overrides) and every space but the ASCII one.
const INVISIBLE = /^[\p{Cc}\p{Cf}\p{Z}]$/u;

/**
 * A name a caller chose (tenant, key, consumer) as text, with every character outside printable
 * ASCII marked and named by its code point (an invisible one shown as its code point), so a
 * look-alike (a Cyrillic а in аcme) or a hidden character never passes for another name.
 */
export function ident(value: string): Html {
  let out = '';
  for (const ch of value) {
    const cp = ch.codePointAt(0) ?? 0;
    if (cp >= 0x20 && cp < 0x7f) {
      out += escapeHtml(ch);
      continue;
    }
    const code = `U+${cp.toString(16).toUpperCase().padStart(4, '0')}`;
    out += `<mark class="nonascii" title="${code}">${INVISIBLE.test(ch) ? code : escapeHtml(ch)}</mark>`;
  }
  return new Html(out);
}
