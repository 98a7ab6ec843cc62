import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { answerPage, confirmPage, refusalPage, resetTable } from './action-pages.js';
import { expireLeasesAction, redriveAction, resetConsumer, resolveAction } from './actions.js';
import { STYLESHEET, SCRIPT } from './assets.js';
import { discoverCapabilities, type Capabilities } from './capabilities.js';
import { apiError, openConsoleDatabase } from './database.js';
import { href, html } from './escape.js';
import { page, type PageContext } from './layout.js';
import { readOperation } from './operation-data.js';
import { operationPage } from './operation-page.js';
import { readHorizonXid, readLanes, readOverview } from './overview-data.js';
import { overviewPage } from './overview-page.js';
import { BadCursorError, REASONS, searchOperations, STATUSES, type SearchQuery } from './search-data.js';
import { searchPage } from './search-page.js';
import { COOKIE_NAME, readCookie, sameSecret, SessionStore, type Session, type SessionOptions } from './session.js';
import { errorBlock } from './action-pages.js';

// `pg-settle console`: server-rendered pages from node:http, no framework and nothing fetched
// from elsewhere (the page works offline). Every response carries a Content-Security-Policy that
// allows scripts, styles and requests from the console's own origin only (no inline script, no
// eval), forbids framing and form posts elsewhere; every action is a POST with the session's
// CSRF token; requests for another Host are refused (DNS rebinding).

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
  /** The address with the access token, to open once. */
  readonly loginUrl: string;
  close(): Promise<void>;
}

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

class HttpProblem extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

/** When each request arrived: its response says how long the server took (Server-Timing). */
const started = new WeakMap<ServerResponse, number>();

function send(
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
    'referrer-policy': 'no-referrer',
    'cache-control': 'no-store',
    'cross-origin-opener-policy': 'same-origin',
    ...extra,
  });
  res.end(body);
}

function redirect(res: ServerResponse, location: string, extra: Record<string, string> = {}): void {
  send(res, 303, '', 'text/plain; charset=utf-8', { location, ...extra });
}

async function readForm(req: IncomingMessage): Promise<URLSearchParams> {
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
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function text(form: URLSearchParams | URL['searchParams'], name: string): string | undefined {
  const value = form.get(name);
  return value === null || value === '' ? undefined : value;
}

function jsonField(
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

export async function startConsole(options: ConsoleOptions): Promise<RunningConsole> {
  const db = openConsoleDatabase(options.databaseUrl);
  const sessions = new SessionStore(options);
  const host = options.host ?? '127.0.0.1';
  // Fail at start, not at the first page, when the login cannot connect or is not migrated.
  await discoverCapabilities(db).catch(async (error: unknown) => {
    await db.end();
    throw error;
  });
  let allowedHosts = new Set<string>();
  const server: Server = createServer((req, res) => {
    started.set(res, performance.now());
    handle(req, res).catch((error: unknown) => {
      if (res.headersSent) return res.destroy();
      if (error instanceof HttpProblem)
        return send(res, error.status, refusalPage(null, `Refused (${error.status})`, error.message));
      send(
        res,
        500,
        page(null, 'Error', html`<h1>The database answered with an error</h1>${errorBlock(apiError(error))}`),
      );
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    if (!allowedHosts.has(req.headers.host ?? ''))
      throw new HttpProblem(421, 'this console answers only on its own address');
    const url = new URL(req.url ?? '/', 'http://console');
    if (req.method === 'GET' && url.pathname === '/static/console.css')
      return send(res, 200, STYLESHEET, 'text/css; charset=utf-8');
    if (req.method === 'GET' && url.pathname === '/static/console.js')
      return send(res, 200, SCRIPT, 'text/javascript; charset=utf-8');
    if (req.method === 'GET' && url.pathname === '/favicon.ico') return send(res, 404, '', 'text/plain');

    const token = url.searchParams.get('token');
    if (req.method === 'GET' && token !== null) {
      const fresh = sessions.exchange(token);
      if (fresh === undefined)
        throw new HttpProblem(
          401,
          'this access token is not valid (it works once; start `pg-settle console` again for a new one)',
        );
      // The token leaves the address bar at once: the session lives in an HttpOnly cookie.
      url.searchParams.delete('token');
      return redirect(res, url.pathname + url.search, {
        'set-cookie': `${COOKIE_NAME}=${fresh.id}; HttpOnly; SameSite=Strict; Path=/; Max-Age=${sessions.cookieMaxAgeSeconds}`,
      });
    }
    const session = sessions.find(readCookie(req.headers.cookie, COOKIE_NAME));
    if (session === undefined) {
      return send(
        res,
        401,
        refusalPage(
          null,
          'Sign in',
          'No session, or it expired: open the address `pg-settle console` printed (with its one-time token).',
        ),
      );
    }
    const caps = await discoverCapabilities(db);
    const ctx: PageContext = { caps, csrf: session.csrf };

    if (req.method === 'GET') return get(url, res, ctx);
    if (req.method !== 'POST') throw new HttpProblem(405, 'GET and POST only');
    // A cross-site form post carries another Origin; a forged one without the token is refused.
    const origin = req.headers.origin;
    if (origin !== undefined && origin !== 'null' && !allowedHosts.has(new URL(origin).host))
      throw new HttpProblem(403, 'refused: this form came from another origin');
    const form = await readForm(req);
    if (!sameSecret(form.get('csrf') ?? '', session.csrf)) {
      return send(
        res,
        403,
        refusalPage(ctx, 'Refused', 'refused: the form carries no valid CSRF token (reload the page and try again)'),
      );
    }
    return post(url.pathname, form, res, ctx, session);
  }

  async function get(url: URL, res: ServerResponse, ctx: PageContext): Promise<void> {
    const q = url.searchParams;
    switch (url.pathname) {
      case '/':
        return send(res, 200, overviewPage(ctx, await readOverview(db, ctx.caps)));
      case '/live.json': {
        const [lanes, horizon] = await Promise.all([readLanes(db, ctx.caps), readHorizonXid(db)]);
        return send(
          res,
          200,
          JSON.stringify({
            lanes: (lanes ?? []).map((l) => ({
              consumer: l.consumer,
              lane: l.lane,
              lagEvents: l.lag_events,
              lagSeconds: l.lag_seconds,
            })),
            horizon,
          }),
          'application/json',
        );
      }
      case '/search': {
        const tenant = text(q, 'tenant');
        const key = text(q, 'key');
        if (tenant !== undefined && key !== undefined) return redirect(res, href('/op', { tenant, key }));
        const status = text(q, 'status');
        const reason = text(q, 'reason');
        const older = text(q, 'older');
        const query: SearchQuery & { key?: string } = {
          ...(tenant === undefined ? {} : { tenant }),
          ...(key === undefined ? {} : { key }),
          ...(status !== undefined && (STATUSES as readonly string[]).includes(status)
            ? { status: status as SearchQuery['status'] & string }
            : {}),
          ...(reason !== undefined && (REASONS as readonly string[]).includes(reason)
            ? { reason: reason as SearchQuery['reason'] & string }
            : {}),
          ...(older !== undefined && /^\d{1,7}$/.test(older) ? { olderThanMinutes: Number(older) } : {}),
          ...(text(q, 'cursor') === undefined ? {} : { cursor: text(q, 'cursor') as string }),
        };
        if (key !== undefined)
          return send(
            res,
            200,
            searchPage(ctx, query, null, 'A key is looked up together with its tenant (both exact).'),
          );
        if (!ctx.caps.read.operations)
          return send(res, 200, searchPage(ctx, query, null, 'This login may not read settle.operations.'));
        const listed =
          tenant !== undefined ||
          query.status !== undefined ||
          query.reason !== undefined ||
          query.olderThanMinutes !== undefined;
        try {
          return send(res, 200, searchPage(ctx, query, listed ? await searchOperations(db, query) : null, null));
        } catch (error) {
          if (error instanceof BadCursorError) return send(res, 400, searchPage(ctx, query, null, error.message));
          throw error;
        }
      }
      case '/op': {
        const tenant = q.get('tenant') ?? '';
        const key = q.get('key') ?? '';
        const data = tenant === '' || key === '' ? null : await readOperation(db, ctx.caps, tenant, key);
        if (data === null) {
          return send(
            res,
            404,
            page(
              ctx,
              'Not found',
              html`<h1>Not found</h1><p id="not-found">No operation <span class="mono">${tenant}</span> / <span class="mono">${key}</span> is visible to this login (it does not exist, was purged, or belongs to a tenant this login may not read).</p><p><a href="/search">Search</a></p>`,
            ),
          );
        }
        return send(res, 200, operationPage(ctx, data));
      }
      default:
        return send(res, 404, page(ctx, 'Not found', html`<h1>Not found</h1><p><a href="/">Overview</a></p>`));
    }
  }

  async function post(
    path: string,
    form: URLSearchParams,
    res: ServerResponse,
    ctx: PageContext,
    session: Session,
  ): Promise<void> {
    const step = form.get('step') ?? 'confirm';
    const tenant = form.get('tenant') ?? '';
    const key = form.get('key') ?? '';
    const opHref = href('/op', { tenant, key });
    const notGranted = (what: string) =>
      send(res, 403, refusalPage(ctx, 'Refused', `refused: this login (${ctx.caps.login}) may not ${what}`));
    switch (path) {
      case '/logout':
        sessions.end(session.id);
        return redirect(res, '/', { 'set-cookie': `${COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0` });
      case '/actions/resolve': {
        if (!ctx.caps.act.resolve) return notGranted('resolve (no EXECUTE on settle.resolve)');
        const outcome = form.get('outcome');
        const reason = form.get('reason')?.trim() ?? '';
        const fingerprint = form.get('fingerprint') ?? '';
        const expected = form.get('expected_attempt') ?? '';
        const payload = jsonField(form, 'payload', true);
        const evidence = jsonField(form, 'evidence', false);
        const problems = [
          outcome === 'completed' || outcome === 'failed' ? null : 'choose completed or failed',
          reason === '' ? 'a reason is required: why, and the ticket' : null,
          /^\d{1,9}$/.test(expected) ? null : 'the page did not say which attempt it showed (reload the operation)',
          payload.ok ? null : payload.problem,
          evidence.ok ? null : evidence.problem,
        ].filter((p): p is string => p !== null);
        if (problems.length > 0 || !payload.ok || !evidence.ok || (outcome !== 'completed' && outcome !== 'failed')) {
          return send(
            res,
            400,
            answerPage(
              ctx,
              'Resolve',
              { ok: false, summary: `not sent: ${problems.join('; ')}`, fields: [], error: null },
              opHref,
              'Back to the operation',
            ),
          );
        }
        const values = {
          tenant,
          key,
          fingerprint,
          outcome,
          payload: payload.text ?? '',
          reason,
          evidence: evidence.text ?? '',
          expected_attempt: expected,
        };
        if (step !== 'apply') {
          const what = html`<p>Resolve <b class="mono">${tenant}</b> / <b class="mono">${key}</b>, looked at in attempt <b>${expected}</b>, as <b>${outcome}</b>${outcome === 'failed' ? ' (asserting that no attempt took effect)' : ''}.</p>
<p>${outcome === 'completed' ? 'result' : 'error'}:</p><pre>${payload.text ?? ''}</pre><p>reason: <b>${reason}</b></p><p>evidence:</p><pre>${evidence.text ?? '-'}</pre>
<p class="muted">Recorded in the audit trail with the login ${ctx.caps.login}. A page older than the operation's current attempt is refused.</p>`;
          return send(
            res,
            200,
            confirmPage(ctx, 'Confirm resolution', '/actions/resolve', what, values, `Resolve as ${outcome}`, opHref),
          );
        }
        const answer = await resolveAction(db, {
          tenant,
          key,
          fingerprint,
          outcome,
          payload: payload.text ?? 'null',
          reason,
          evidence: evidence.text,
          expectedAttempt: Number(expected),
        });
        return send(res, answer.ok ? 200 : 409, answerPage(ctx, 'Resolve', answer, opHref, 'Back to the operation'));
      }
      case '/actions/redrive': {
        if (!ctx.caps.act.redrive) return notGranted('redrive (no EXECUTE on settle.redrive)');
        const attempts = form.get('attempts') ?? '1';
        if (!/^\d{1,4}$/.test(attempts) || Number(attempts) < 1 || Number(attempts) > 1000) {
          return send(
            res,
            400,
            refusalPage(ctx, 'Redrive', 'additional attempts must be a whole number from 1 to 1000'),
          );
        }
        const reason = form.get('reason')?.trim() ?? '';
        if (step !== 'apply') {
          return send(
            res,
            200,
            confirmPage(
              ctx,
              'Confirm redrive',
              '/actions/redrive',
              html`<p>Re-open <b class="mono">${tenant}</b> / <b class="mono">${key}</b> with ${attempts} more attempt(s). Its next claim runs it again.</p>${reason === '' ? '' : html`<p>reason: <b>${reason}</b></p>`}`,
              { tenant, key, attempts, reason },
              'Redrive',
              opHref,
            ),
          );
        }
        const answer = await redriveAction(db, tenant, key, Number(attempts), reason === '' ? null : reason);
        return send(res, answer.ok ? 200 : 409, answerPage(ctx, 'Redrive', answer, opHref, 'Back to the operation'));
      }
      case '/actions/expire-leases': {
        if (!ctx.caps.act.expireLeases) return notGranted('expire leases (no EXECUTE on settle.expire_leases)');
        if (step !== 'apply') {
          const overview = await readOverview(db, ctx.caps);
          const lapsed = overview.metrics === null ? 'the' : String(Number(overview.metrics.lapsed_leases ?? 0));
          return send(
            res,
            200,
            confirmPage(
              ctx,
              'Confirm: expire leases',
              '/actions/expire-leases',
              html`<p>End ${lapsed} lapsed lease(s) now (settle.expire_leases): each operation goes to unknown, pending or a dead letter as its attempt budget says.</p>`,
              {},
              'Expire lapsed leases',
              '/',
            ),
          );
        }
        return send(res, 200, answerPage(ctx, 'Expire leases', await expireLeasesAction(db), '/', 'Overview'));
      }
      case '/actions/reset-consumer': {
        if (!ctx.caps.act.resetConsumer) return notGranted('reset a consumer (no EXECUTE on settle.reset_consumer)');
        const consumer = form.get('consumer') ?? '';
        const to = form.get('to') ?? 'now';
        if (to !== 'now' && to !== 'earliest' && Number.isNaN(Date.parse(to)))
          return send(res, 400, refusalPage(ctx, 'Reset consumer', 'to must be now, earliest or an ISO 8601 time'));
        if (step === 'form') {
          return send(
            res,
            200,
            page(
              ctx,
              'Reset consumer',
              html`<h1>Reset consumer <span class="mono">${consumer}</span></h1>
<form method="post" action="/actions/reset-consumer" id="reset-form">${html`<input type="hidden" name="csrf" value="${ctx.csrf}">`}<input type="hidden" name="consumer" value="${consumer}"><input type="hidden" name="step" value="confirm">
<label><input type="radio" name="to" value="now" checked> skip to now (everything committed is passed over)</label>
<label><input type="radio" name="to" value="earliest"> deliver every retained event again</label>
<p><button type="submit">Preview…</button> <a href="/">Cancel</a></p></form>`,
            ),
          );
        }
        const preview = await resetConsumer(db, consumer, to, step !== 'apply');
        if ('error' in preview)
          return send(
            res,
            409,
            answerPage(
              ctx,
              'Reset consumer',
              { ok: false, summary: 'reset refused', fields: [], error: preview.error },
              '/',
              'Overview',
            ),
          );
        const total = preview.rows.reduce((n, r) => n + r.events_to_deliver, 0);
        if (step !== 'apply') {
          return send(
            res,
            200,
            confirmPage(
              ctx,
              'Confirm: reset consumer',
              '/actions/reset-consumer',
              html`<p>Move every lane of <b class="mono">${consumer}</b> (${to === 'now' ? 'skip to now' : to === 'earliest' ? 'every retained event again' : `from ${to}`}): <b id="to-deliver">${total}</b> event(s) would be delivered.</p>${resetTable(preview.rows)}`,
              { consumer, to },
              'Reset consumer',
              '/',
            ),
          );
        }
        return send(
          res,
          200,
          answerPage(
            ctx,
            'Reset consumer',
            {
              ok: true,
              summary: `reset ${consumer}: ${total} event(s) to deliver`,
              fields: preview.rows.map((r) => [
                `lane ${r.lane + 1}`,
                `${r.position_before} → ${r.position_after} (${r.events_to_deliver} to deliver)`,
              ]),
              error: null,
            },
            '/',
            'Overview',
          ),
        );
      }
      default:
        throw new HttpProblem(404, 'no such action');
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const hostPart = host.includes(':') ? `[${host}]` : host;
  allowedHosts = new Set([`${hostPart}:${port}`, `localhost:${port}`, `127.0.0.1:${port}`]);
  const base = `http://${hostPart}:${port}`;
  return {
    url: base,
    loginUrl: `${base}/?token=${encodeURIComponent(sessions.token)}`,
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await db.end();
    },
  };
}

export type { Capabilities };
