import { href, html, jsonText, type Html } from './escape.js';

// JSON values on a page (results, errors, requests, audit details): small ones pretty-printed in
// full; a large one (a 1 MB result made a 2.6 MB page) collapsed to its size and its first
// characters, with a link to the whole value as JSON at an address of its own (/op/json).

/** Compact JSON up to this many characters is shown in full (pretty-printed). */
export const JSON_SHOWN = 4096;
/** Characters of a larger value shown, collapsed, on the page. */
export const JSON_PREVIEW = 1000;

/** Where the whole of one JSON value of an operation is served (read-routes.ts). */
export function jsonHref(tenant: string, key: string, field: string): string {
  return href('/op/json', { tenant, key, field });
}

export function jsonBlock(value: unknown, whole: string | null = null): Html {
  if (value === null || value === undefined) return html`<span class="muted">-</span>`;
  const compact = JSON.stringify(value, (_k, v: unknown) => (typeof v === 'bigint' ? v.toString() : v)) ?? '';
  if (compact.length <= JSON_SHOWN) return html`<pre>${jsonText(value)}</pre>`;
  const bytes = Buffer.byteLength(compact, 'utf8');
  const size = bytes >= 1_048_576 ? `${(bytes / 1_048_576).toFixed(1)} MB` : `${Math.ceil(bytes / 1024)} KB`;
  return html`<details class="json-large"><summary>${size} of JSON: its first ${JSON_PREVIEW.toLocaleString('en')} characters${whole === null ? '' : html` · <a href="${whole}" class="json-whole">the whole value</a>`}</summary><pre>${compact.slice(0, JSON_PREVIEW)}…</pre></details>`;
}
