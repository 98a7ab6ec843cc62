import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { hostname, networkInterfaces } from 'node:os';
import { errorBlock, refusalPage } from './action-pages.js';
import { actionRoute } from './action-routes.js';
import { SCRIPT, STYLESHEET } from './assets.js';
import { discoverCapabilities, type Capabilities } from './capabilities.js';
import { apiError, openConsoleDatabase } from './database.js';
import { html } from './escape.js';
import {
  checkOrigin,
  CONTENT_SECURITY_POLICY,
  HttpProblem,
  localPath,
  readForm,
  requestUrl,
  seeOther,
  send,
  sendReply,
  started,
  type Reply,
} from './http.js';
import { page, type PageContext } from './layout.js';
import { readRoute } from './read-routes.js';
import {
  ANSWERS_KEPT,
  cookieName,
  newSecret,
  readCookie,
  sameSecret,
  SessionStore,
  type SessionOptions,
} from './session.js';
import { signInPage, type SignInReason } from './sign-in-page.js';

// `pg-settle console`: server-rendered pages from node:http, no framework and nothing fetched
// from elsewhere (the page works offline). Every response carries a Content-Security-Policy that
// allows scripts, styles and requests from the console's own origin only (no inline script, no
// eval), forbids framing and form posts elsewhere; every action is a POST with the session's
// CSRF token and this console's Origin; requests for another Host are refused (DNS rebinding),
// and so is any request another origin's page makes, but a navigation (http.ts, checkOrigin).

export { CONTENT_SECURITY_POLICY };

export interface ConsoleOptions extends SessionOptions {
  /** The operator's database login: it decides what the page shows and may do. */
  readonly databaseUrl: string;
  /** Address to bind (default 127.0.0.1). */
  readonly host?: string;
  /** Port (default 0: a free one). */
  readonly port?: number;
}

export interface RunningConsole {
  /** The console's address, http://host:port (bound to every interface: its first non-loopback address). */
  readonly url: string;
  /** Every address it answers on (bound to every interface: each of this machine's, and its name). */
  readonly urls: readonly string[];
  /** Bound to an address other machines may reach (not loopback): without TLS. */
  readonly exposed: boolean;
  /** The address with the first access token, to open once. */
  readonly loginUrl: string;
  /** The session cookie's name (per console: its port). */
  readonly cookieName: string;
  /** A new one-time sign-in address (valid 15 minutes): the way back in without a restart. */
  newLoginUrl(): string;
  close(): Promise<void>;
}

// Connection failures: the database is down or unreachable, not an error in what was asked.
const UNREACHABLE = /^(ECONNREFUSED|ECONNRESET|ENOTFOUND|ETIMEDOUT|EHOSTUNREACH|57P0[123]|08\w{3})$/;

function failure(res: ServerResponse, error: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (error instanceof HttpProblem)
    return send(res, error.status, refusalPage(null, `Refused (${error.status})`, error.message));
  const e = apiError(error);
  const code = (error as { code?: unknown }).code;
  const unreachable =
    (typeof code === 'string' && UNREACHABLE.test(code)) ||
    /Connection terminated|connect ECONNREFUSED|timeout exceeded when trying to connect/i.test(e.message);
  if (unreachable)
    return send(
      res,
      503,
      page(
        null,
        'Database unreachable',
        html`<h1>The database is not reachable</h1><p id="unreachable">The console could not reach its database: ${e.message}. Nothing was read or changed; reload once the database is back.</p>`,
      ),
    );
  // A value the database refused as input (class 22, data exception): the request is at fault.
  if (e.sqlstate?.startsWith('22'))
    return send(res, 400, page(null, 'Bad input', html`<h1>The database refused this input</h1>${errorBlock(e)}`));
  send(res, 500, page(null, 'Error', html`<h1>The database answered with an error</h1>${errorBlock(e)}`));
}

export async function startConsole(options: ConsoleOptions): Promise<RunningConsole> {
  const db = openConsoleDatabase(options.databaseUrl);
  const sessions = new SessionStore(options);
  const host = options.host ?? '127.0.0.1';
  // Fail at start, not at the first page, when the login cannot connect or is not migrated.
  await discoverCapabilities(db).catch(async (error: unknown) => {
    await db.end();
    throw error;
  });
  // Set once the server listens (they name its port).
  let origins = new Set<string>();
  let cookie = '';
  const server: Server = createServer((req, res) => {
    started.set(res, performance.now());
    handle(req).then(
      (reply) => sendReply(res, reply),
      (error: unknown) => failure(res, error),
    );
  });

  const sessionCookie = (value: string, maxAge: number): Record<string, string> => ({
    'set-cookie': `${cookie}=${value}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${maxAge}`,
  });

  async function handle(req: IncomingMessage): Promise<Reply> {
    const origin = `http://${req.headers.host ?? ''}`;
    if (!origins.has(origin)) throw new HttpProblem(421, 'this console answers only on its own address');
    const url = requestUrl(req);
    if (req.method === 'GET' && url.pathname === '/static/console.css')
      return { status: 200, body: STYLESHEET, type: 'text/css; charset=utf-8' };
    if (req.method === 'GET' && url.pathname === '/static/console.js')
      return { status: 200, body: SCRIPT, type: 'text/javascript; charset=utf-8' };
    if (req.method === 'GET' && url.pathname === '/favicon.ico') return { status: 404, body: '', type: 'text/plain' };
    if (req.method !== 'GET' && req.method !== 'POST') throw new HttpProblem(405, 'GET and POST only');
    checkOrigin(req, origin);

    const token = url.searchParams.get('token');
    if (req.method === 'GET' && token !== null) {
      url.searchParams.delete('token');
      return signIn(token, url.pathname + url.search);
    }
    const cookieValue = readCookie(req.headers.cookie, cookie);
    if (url.pathname === '/sign-in') {
      if (req.method === 'POST') {
        const form = await readForm(req);
        return signIn(tokenOf(form.get('token') ?? ''), localPath(form.get('next')));
      }
      return signInReply(
        url.searchParams.get('out') === '1' ? 'signed-out' : 'none',
        localPath(url.searchParams.get('next')),
      );
    }
    const session = sessions.find(cookieValue);
    if (session === undefined) {
      const next = req.method === 'GET' ? url.pathname + url.search : '/';
      // A link followed from another site carries no SameSite=Strict cookie: the page offers the
      // same address again, which the browser then opens with the session, if there is one.
      const elsewhere = cookieValue === undefined && req.headers['sec-fetch-site'] === 'cross-site';
      return signInReply(elsewhere ? 'elsewhere' : cookieValue === undefined ? 'none' : 'ended', next);
    }
    if (req.method === 'GET' && url.pathname === '/answer') {
      const kept = session.answers.get(url.searchParams.get('id') ?? '');
      if (kept !== undefined) return kept;
      throw new HttpProblem(404, `no such answer: a session keeps the answers to its last ${ANSWERS_KEPT} actions`);
    }
    const caps = await discoverCapabilities(db);
    const ctx: PageContext = { caps, csrf: session.csrf };
    if (req.method === 'GET') return readRoute(db, url, ctx);
    const form = await readForm(req);
    if (!sameSecret(form.get('csrf') ?? '', session.csrf)) {
      return {
        status: 403,
        body: refusalPage(
          ctx,
          'Refused',
          'refused: the form carries no valid CSRF token (reload the page and try again)',
        ),
      };
    }
    if (url.pathname === '/logout') {
      sessions.end(session.id);
      return seeOther('/sign-in?out=1', sessionCookie('', 0));
    }
    const reply = await actionRoute(db, url.pathname, form, ctx);
    if (reply.answer !== true) return reply;
    // POST, redirect, GET: the answer's page is kept and shown at its own address, so reloading
    // it (or going back to it) shows the answer again and never applies the action twice.
    const id = newSecret().slice(0, 16);
    session.answers.set(id, { status: reply.status, body: reply.body });
    for (const old of session.answers.keys()) if (session.answers.size > ANSWERS_KEPT) session.answers.delete(old);
    return seeOther(`/answer?id=${id}`);
  }

  /** A session for a valid token, and back to `next`; the sign-in page otherwise. */
  function signIn(token: string, next: string): Reply {
    const fresh = sessions.exchange(token);
    if (fresh === undefined) return signInReply('invalid', next);
    // The token leaves the address bar at once: the session lives in an HttpOnly cookie.
    return seeOther(next, sessionCookie(fresh.id, sessions.cookieMaxAgeSeconds));
  }

  function signInReply(reason: SignInReason, next: string): Reply {
    return { status: 401, body: signInPage(reason, next) };
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const names = reachableAs(host);
  origins = new Set([...names, 'localhost', '127.0.0.1'].map((name) => `http://${name}:${port}`));
  cookie = cookieName(port);
  const base = `http://${names[0] ?? '127.0.0.1'}:${port}`;
  const loginAddress = (token: string) => `${base}/?token=${encodeURIComponent(token)}`;
  return {
    url: base,
    urls: names.map((name) => `http://${name}:${port}`),
    exposed: !isLoopback(host),
    loginUrl: loginAddress(sessions.token),
    cookieName: cookie,
    newLoginUrl: () => loginAddress(sessions.issueToken()),
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await db.end();
    },
  };
}

const WILDCARDS = new Set(['0.0.0.0', '::', '[::]']);

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}

/**
 * The names a browser may use for a console bound to `host` (each answered; any other Host is
 * refused, 421): the address itself, or, bound to every interface (0.0.0.0, ::), this machine's
 * addresses (non-loopback first: the first is the one printed) and its host name.
 */
function reachableAs(host: string): string[] {
  const bracket = (a: string) => (a.includes(':') ? `[${a}]` : a);
  if (!WILDCARDS.has(host)) return [bracket(host)];
  const ipv4Only = host === '0.0.0.0';
  const found = Object.values(networkInterfaces())
    .flat()
    // Not link-local IPv6 (fe80::/10): its zone (%eth0) makes no Host a browser sends.
    .filter((i) => i !== undefined && (!ipv4Only || i.family === 'IPv4') && !/^fe[89ab]/i.test(i.address))
    .sort((a, b) => Number(a?.internal) - Number(b?.internal))
    .map((i) => bracket(i?.address ?? ''));
  return [...new Set([...found, hostname()])].filter((a) => a !== '');
}

/** The token of a pasted sign-in address, or the pasted token itself. */
function tokenOf(pasted: string): string {
  const value = pasted.trim();
  try {
    return new URL(value).searchParams.get('token') ?? value;
  } catch {
    return value;
  }
}

export type { Capabilities };
