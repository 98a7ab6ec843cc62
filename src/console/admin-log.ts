import { z } from 'zod';
import type { ConsoleDatabase } from './database.js';
import { href, html, ident } from './escape.js';
import { HttpProblem, pageReply, text, type Reply } from './http.js';
import { jsonBlock } from './json-block.js';
import { page, when, type PageContext } from './layout.js';

// The admin log (settle.admin_log): who changed access, retention, upkeep and the feed's
// consumers, newest first, by event and actor, paged by log_id (its primary key: each page is a
// range of it). A login bound to tenants sees the changes naming its tenants (the view filters).

export const ADMIN_EVENTS = [
  'grant_tenant',
  'revoke_tenant',
  'revoke_binding',
  'set_purge_min_retention',
  'set_retention',
  'set_upkeep_interval',
  'set_in_doubt_after',
  'register_consumer',
  'drop_consumer',
  'reset_consumer',
] as const;
const PAGE = 50;

const row = z.object({ log_id: z.string(), at: z.date(), event: z.string(), actor: z.string(), detail: z.unknown() });

export async function adminLogRoute(db: ConsoleDatabase, q: URLSearchParams, ctx: PageContext): Promise<Reply> {
  if (!ctx.caps.read.adminLog)
    return pageReply(
      200,
      page(ctx, 'Admin log', html`<h1>Admin log</h1><p class="muted">This login may not read settle.admin_log.</p>`),
    );
  const event = text(q, 'event');
  const actor = text(q, 'actor');
  const before = text(q, 'before');
  if (event !== undefined && !(ADMIN_EVENTS as readonly string[]).includes(event))
    throw new HttpProblem(400, `event must be one of ${ADMIN_EVENTS.join(', ')}`);
  if (before !== undefined && !/^\d{1,18}$/.test(before)) throw new HttpProblem(400, 'not a cursor of this page');
  const rows = await db.rows(
    row,
    `select l.log_id::text as log_id, l.at, l.event, l.actor, l.detail from settle.admin_log l
      where ($1::text is null or l.event = $1) and ($2::text is null or l.actor = $2)
        and ($3::bigint is null or l.log_id < $3::bigint)
      order by l.log_id desc limit ${PAGE + 1}`,
    [event ?? null, actor ?? null, before ?? null],
  );
  const shown = rows.slice(0, PAGE);
  const next = rows.length > PAGE ? shown.at(-1)?.log_id : undefined;
  const now = new Date();
  return pageReply(
    200,
    page(
      ctx,
      'Admin log',
      html`<h1>Admin log <span class="muted">(settle.admin_log, newest first)</span></h1>
<form method="get" action="/admin-log" class="filters" id="admin-log-form">
<div><label for="event">event</label><select name="event" id="event"><option value="">any</option>${ADMIN_EVENTS.map((e) => html`<option value="${e}"${e === event ? html` selected` : ''}>${e}</option>`)}</select></div>
<div><label for="actor">actor (login, exact)</label><input type="text" name="actor" id="actor" value="${actor ?? ''}"></div>
<div><button type="submit">Show</button></div></form>
${
  shown.length === 0
    ? html`<p class="muted" id="no-results">No change visible to this login matches.</p>`
    : html`<table id="admin-log"><tr><th>#</th><th>at</th><th>event</th><th>actor</th><th>detail</th></tr>
${shown.map((r) => html`<tr><td>${r.log_id}</td><td>${when(r.at, now)}</td><td>${r.event}</td><td class="mono">${ident(r.actor)}</td><td>${jsonBlock(r.detail)}</td></tr>`)}</table>`
}
${next === undefined ? html`<p class="muted">End of the log.</p>` : html`<p><a id="next-page" href="${href('/admin-log', { event, actor, before: next })}">Older →</a></p>`}`,
    ),
  );
}
