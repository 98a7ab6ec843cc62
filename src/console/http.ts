import type { IncomingMessage, ServerResponse } from 'node:http';

// The console's HTTP plumbing: the headers every response carries, redirects, form bodies and
// the checks of what a request carries (a query or form value with a NUL byte, a malformed
// Origin or URL is refused with 400, never passed on to the database).

export const CONTENT_SECURITY_POLICY = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "connect-src 'self'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
].join('; ');

const MAX_BODY_BYTES = 3 * 1024 * 1024;

/** A refusal with its HTTP status, shown as a page. */
export class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** What a route answers: a page (or JSON) with its status, or a redirect. */
export interface Reply {
  readonly status: number;
  readonly body: string;
  readonly type?: string;
  readonly headers?: Readonly<Record<string, string>>;
  /** The answer to an applied action: shown after a redirect, so a reload never applies it again. */
  readonly answer?: boolean;
}

export const pageReply = (status: number, body: string): Reply => ({ status, body });

/** The page of an action's answer: server.ts keeps it and redirects to it (POST, redirect, GET). */
export const answerReply = (status: number, body: string): Reply => ({ status, body, answer: true });

export const seeOther = (location: string, headers: Readonly<Record<string, string>> = {}): Reply => ({
  status: 303,
  body: '',
  type: 'text/plain; charset=utf-8',
  headers: { location, ...headers },
});

/** When each request arrived: its response says how long the server took (Server-Timing). */
export const started = new WeakMap<ServerResponse, number>();

export function send(
  res: ServerResponse,
  status: number,
  body: string,
  type = 'text/html; charset=utf-8',
  extra: Record<string, string> = {},
): void {
  const since = started.get(res);
  res.writeHead(status, {
    ...(since === undefined ? {} : { 'server-timing': `app;dur=${(performance.now() - since).toFixed(1)}` }),
    'content-type': type,
    'content-security-policy': CONTENT_SECURITY_POLICY,
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    // Not no-referrer: under it a browser sends `Origin: null` with every POST, its own forms'
    // too, and the Origin check (checkOrigin) could not tell them from a sandboxed page's. Under
    // same-origin no Referer leaves for another origin either.
    'referrer-policy': 'same-origin',
    'cache-control': 'no-store',
    'cross-origin-opener-policy': 'same-origin',
    'cross-origin-resource-policy': 'same-origin',
    vary: 'Cookie, Sec-Fetch-Site',
    ...extra,
  });
  res.end(body);
}

export function sendReply(res: ServerResponse, reply: Reply): void {
  send(res, reply.status, reply.body, reply.type, { ...reply.headers });
}

/** A path of this console to return to (never another origin): `/...`, not `//...`, no NUL. */
export function localPath(value: string | null | undefined): string {
  if (value === null || value === undefined || !value.startsWith('/') || value.startsWith('//')) return '/';
  if (/[\\\u0000-\u001f]/.test(value)) return '/';
  return value;
}

function refuseNul(name: string, value: string): string {
  if (value.includes('\u0000')) throw new HttpProblem(400, `${name} contains a NUL byte`);
  return value;
}

/** The request's URL; 400 when it cannot be read or carries a NUL byte. */
export function requestUrl(req: IncomingMessage): URL {
  let url: URL;
  try {
    url = new URL(req.url ?? '/', 'http://console');
  } catch {
    throw new HttpProblem(400, 'the address cannot be read');
  }
  for (const [name, value] of url.searchParams) refuseNul(`the query parameter ${name}`, value);
  return url;
}

export async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
  const type = req.headers['content-type'] ?? '';
  if (!type.startsWith('application/x-www-form-urlencoded'))
    throw new HttpProblem(415, 'forms only (application/x-www-form-urlencoded)');
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) throw new HttpProblem(413, 'form too large');
    chunks.push(chunk as Buffer);
  }
  const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
  for (const [name, value] of form) refuseNul(`the field ${name}`, value);
  return form;
}

/** A non-empty value of a query or form, or undefined. */
export function text(form: URLSearchParams, name: string): string | undefined {
  const value = form.get(name);
  return value === null || value === '' ? undefined : value;
}

/** A form field of JSON text, normalized; or what is wrong with it. */
export function jsonField(
  form: URLSearchParams,
  name: string,
  required: boolean,
): { ok: true; text: string | null } | { ok: false; problem: string } {
  const raw = form.get(name)?.trim() ?? '';
  if (raw === '') return required ? { ok: false, problem: `${name} is required (JSON)` } : { ok: true, text: null };
  try {
    return { ok: true, text: JSON.stringify(JSON.parse(raw)) };
  } catch (error) {
    return { ok: false, problem: `${name} is not valid JSON: ${(error as Error).message}` };
  }
}

/**
 * The request comes from this console's own pages, as the browser says in what a page cannot
 * set: a POST must carry this console's Origin (a form of another origin, a plain HTTP client
 * without one, `Origin: null` and a malformed Origin are refused); any request a page of another
 * origin made (Sec-Fetch-Site same-site or cross-site: another port of this host is same-site) is
 * refused, except a navigation to a page (a link someone followed; it changes nothing).
 */
export function checkOrigin(req: IncomingMessage, origin: string): void {
  const site = req.headers['sec-fetch-site'];
  const mode = req.headers['sec-fetch-mode'];
  if (req.method === 'POST') {
    const given = req.headers.origin;
    if (given !== undefined && given !== 'null' && !URL.canParse(given))
      throw new HttpProblem(400, 'the Origin header cannot be read');
    if (given === undefined || given !== origin)
      throw new HttpProblem(
        403,
        given === undefined
          ? 'refused: a form must come from this console’s page (the request carries no Origin)'
          : 'refused: this form came from another origin',
      );
    if (site !== undefined && site !== 'same-origin')
      throw new HttpProblem(403, 'refused: this form came from another site');
    return;
  }
  if ((site === 'same-site' || site === 'cross-site') && mode !== 'navigate')
    throw new HttpProblem(403, 'refused: a page of another origin asked for this');
}
