import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
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
import { cookieName, readCookie, sameSecret, SessionStore, type SessionOptions } from './session.js';
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
  /** The console's address, http://host:port. */
  readonly url: string;
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
    return actionRoute(db, url.pathname, form, ctx);
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
  const hostPart = host.includes(':') ? `[${host}]` : host;
  origins = new Set([`http://${hostPart}:${port}`, `http://localhost:${port}`, `http://127.0.0.1:${port}`]);
  cookie = cookieName(port);
  const base = `http://${hostPart}:${port}`;
  const loginAddress = (token: string) => `${base}/?token=${encodeURIComponent(token)}`;
  return {
    url: base,
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
