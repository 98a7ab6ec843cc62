import { HttpProblem, pageReply, seeOther, text, type Reply } from './http.js';
import { adminLogRoute } from './admin-log.js';
import type { ConsoleDatabase } from './database.js';
import { deadLetterGroups } from './dead-letter-data.js';
import { deadLettersPage } from './dead-letters-page.js';
import { href, html, ident } from './escape.js';
import { page, type PageContext } from './layout.js';
import { type OperationData, readOperation } from './operation-data.js';
import { operationPage } from './operation-page.js';
import { readHorizonXid, readLanes, readOverview } from './overview-data.js';
import { overviewPage } from './overview-page.js';
import { BadCursorError, REASONS, searchOperations, STATUSES, type SearchQuery } from './search-data.js';
import { searchPage } from './search-page.js';

// The console's pages (GET): each reads through the login's own grants and changes nothing.

export async function readRoute(db: ConsoleDatabase, url: URL, ctx: PageContext): Promise<Reply> {
  const q = url.searchParams;
  switch (url.pathname) {
    case '/':
      return pageReply(200, overviewPage(ctx, await readOverview(db, ctx.caps)));
    case '/live.json': {
      const [lanes, horizon] = await Promise.all([readLanes(db, ctx.caps), readHorizonXid(db)]);
      return {
        status: 200,
        type: 'application/json',
        body: JSON.stringify({
          lanes: (lanes ?? []).map((l) => ({
            consumer: l.consumer,
            lane: l.lane,
            lagEvents: l.lag_events,
            lagSeconds: l.lag_seconds,
          })),
          horizon,
        }),
      };
    }
    case '/search':
      return search(db, q, ctx);
    case '/dead-letters': {
      if (!ctx.caps.read.deadLetters)
        return pageReply(
          200,
          page(
            ctx,
            'Dead letters',
            html`<h1>Dead letters</h1><p class="muted">This login may not read settle.dead_letters.</p>`,
          ),
        );
      const tenant = text(q, 'tenant') ?? null;
      return pageReply(200, deadLettersPage(ctx, await deadLetterGroups(db, tenant), tenant));
    }
    case '/admin-log':
      return adminLogRoute(db, q, ctx);
    case '/op/json': {
      // One JSON value of an operation, whole (json-block.ts): what the page collapses.
      const tenant = q.get('tenant') ?? '';
      const key = q.get('key') ?? '';
      const data = tenant === '' || key === '' ? null : await readOperation(db, ctx.caps, tenant, key);
      const value = data === null ? undefined : jsonField(data, q.get('field') ?? '');
      if (value === undefined) throw new HttpProblem(404, 'no such value of an operation visible to this login');
      return { status: 200, type: 'application/json; charset=utf-8', body: JSON.stringify(value, null, 2) };
    }
    case '/op': {
      const tenant = q.get('tenant') ?? '';
      const key = q.get('key') ?? '';
      const data = tenant === '' || key === '' ? null : await readOperation(db, ctx.caps, tenant, key);
      if (data === null) {
        return pageReply(
          404,
          page(
            ctx,
            'Not found',
            html`<h1>Not found</h1><p id="not-found">No operation <span class="mono">${ident(tenant)}</span> / <span class="mono">${ident(key)}</span> is visible to this login (it does not exist, was purged, or belongs to a tenant this login may not read).</p><p><a href="/search">Search</a></p>`,
          ),
        );
      }
      return pageReply(200, operationPage(ctx, data));
    }
    default:
      return pageReply(404, page(ctx, 'Not found', html`<h1>Not found</h1><p><a href="/">Overview</a></p>`));
  }
}

/** The search form's filters; a value the form cannot have is named, never dropped silently. */
function searchQuery(q: URLSearchParams): { query: SearchQuery & { key?: string }; problems: string[] } {
  const problems: string[] = [];
  const oneOf = <T extends string>(name: string, allowed: readonly T[]): T | undefined => {
    const value = text(q, name);
    if (value === undefined || (allowed as readonly string[]).includes(value)) return value as T | undefined;
    problems.push(`${name} must be one of ${allowed.join(', ')} (got ${JSON.stringify(value)})`);
    return undefined;
  };
  const tenant = text(q, 'tenant');
  const key = text(q, 'key');
  const status = oneOf('status', STATUSES);
  const reason = oneOf('reason', REASONS);
  const older = text(q, 'older');
  if (older !== undefined && !/^\d{1,7}$/.test(older))
    problems.push(`older must be a whole number of minutes, 0 to 9999999 (got ${JSON.stringify(older)})`);
  const cursor = text(q, 'cursor');
  const code = text(q, 'code');
  if (code !== undefined && reason === undefined && problems.length === 0)
    problems.push('an error code goes with a dead-letter reason');
  return {
    problems,
    query: {
      ...(tenant === undefined ? {} : { tenant }),
      ...(key === undefined ? {} : { key }),
      ...(status === undefined ? {} : { status }),
      ...(reason === undefined ? {} : { reason }),
      ...(older !== undefined && /^\d{1,7}$/.test(older) ? { olderThanMinutes: Number(older) } : {}),
      ...(cursor === undefined ? {} : { cursor }),
      ...(code === undefined ? {} : { code }),
    },
  };
}

async function search(db: ConsoleDatabase, q: URLSearchParams, ctx: PageContext): Promise<Reply> {
  const tenant = text(q, 'tenant');
  const key = text(q, 'key');
  if (tenant !== undefined && key !== undefined) return seeOther(href('/op', { tenant, key }));
  const { query, problems } = searchQuery(q);
  if (problems.length > 0) return pageReply(400, searchPage(ctx, query, null, `Not searched: ${problems.join('; ')}.`));
  if (key !== undefined)
    return pageReply(200, searchPage(ctx, query, null, 'A key is looked up together with its tenant (both exact).'));
  if (!ctx.caps.read.operations)
    return pageReply(200, searchPage(ctx, query, null, 'This login may not read settle.operations.'));
  const listed =
    tenant !== undefined ||
    query.status !== undefined ||
    query.reason !== undefined ||
    query.olderThanMinutes !== undefined;
  try {
    return pageReply(200, searchPage(ctx, query, listed ? await searchOperations(db, query) : null, null));
  } catch (error) {
    if (error instanceof BadCursorError) return pageReply(400, searchPage(ctx, query, null, error.message));
    throw error;
  }
}

/** A JSON value of an operation by its name on the page: result, error, request, attempt:N:error,
 * attempt:N:late_result, audit:SEQ:AUDIT_ID; undefined when there is none. */
function jsonField(data: OperationData, field: string): unknown {
  const op = data.operation;
  if (field === 'result' || field === 'error' || field === 'request') return op[field] ?? undefined;
  const [kind, a, b] = field.split(':');
  if (kind === 'attempt' && (b === 'error' || b === 'late_result'))
    return data.attempts.find((x) => String(x.attempt) === a)?.[b] ?? undefined;
  if (kind === 'audit') return data.audit?.find((x) => x.seq === a && x.audit_id === b)?.detail ?? undefined;
  return undefined;
}
