import { pageReply, seeOther, text, type Reply } from './http.js';
import type { ConsoleDatabase } from './database.js';
import { href, html } from './escape.js';
import { page, type PageContext } from './layout.js';
import { readOperation } from './operation-data.js';
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
            html`<h1>Not found</h1><p id="not-found">No operation <span class="mono">${tenant}</span> / <span class="mono">${key}</span> is visible to this login (it does not exist, was purged, or belongs to a tenant this login may not read).</p><p><a href="/search">Search</a></p>`,
          ),
        );
      }
      return pageReply(200, operationPage(ctx, data));
    }
    default:
      return pageReply(404, page(ctx, 'Not found', html`<h1>Not found</h1><p><a href="/">Overview</a></p>`));
  }
}

async function search(db: ConsoleDatabase, q: URLSearchParams, ctx: PageContext): Promise<Reply> {
  const tenant = text(q, 'tenant');
  const key = text(q, 'key');
  if (tenant !== undefined && key !== undefined) return seeOther(href('/op', { tenant, key }));
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
