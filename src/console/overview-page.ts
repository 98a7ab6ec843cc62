import { CLIENT_RULES, evaluateAlerts } from './alerts.js';
import { href, html, type Html, ident } from './escape.js';
import { age, csrfField, page, when, type PageContext } from './layout.js';
import { COUNT_CAP, type OverviewData } from './overview-data.js';
import { throughputChart } from './svg.js';

const num = (value: unknown): number => Number(value ?? 0);

function tiles(data: OverviewData): Html {
  const waiting = (status: string) => data.waiting.find((w) => w.status === status);
  const dead = (reason: string) => data.deadLetters.find((d) => d.reason === reason);
  const tile = (label: string, n: number, oldest: Date | null | undefined, link: string) =>
    html`<a class="tile" href="${link}"><div class="muted">${label}</div><div class="n">${n > COUNT_CAP ? `${COUNT_CAP.toLocaleString('en')}+` : n}</div><div class="muted">${oldest === null || oldest === undefined ? 'none' : html`oldest ${age((data.now.getTime() - oldest.getTime()) / 1000)}`}</div></a>`;
  return html`<div class="grid" id="attention">
${tile('unknown', waiting('unknown')?.n ?? 0, waiting('unknown')?.oldest, href('/search', { status: 'unknown' }))}
${tile('conflict', waiting('conflict')?.n ?? 0, waiting('conflict')?.oldest, href('/search', { status: 'conflict' }))}
${tile('needs_reconciliation', dead('needs_reconciliation')?.n ?? 0, dead('needs_reconciliation')?.oldest, href('/search', { reason: 'needs_reconciliation' }))}
${tile('dead letters: attempts_exhausted', dead('attempts_exhausted')?.n ?? 0, dead('attempts_exhausted')?.oldest, href('/search', { reason: 'attempts_exhausted' }))}
${tile('pending (retry backlog)', waiting('pending')?.n ?? 0, waiting('pending')?.oldest, href('/search', { status: 'pending' }))}
</div>`;
}

function oldest(data: OverviewData): Html {
  if (data.oldest.length === 0) return html``;
  return html`<h2>Oldest needing reconciliation</h2><table><tr><th>tenant</th><th>key</th><th>status</th><th>dead-lettered</th></tr>
${data.oldest.map((o) => html`<tr><td class="mono">${ident(o.tenant)}</td><td><a class="mono" href="${href('/op', { tenant: o.tenant, key: o.key })}">${ident(o.key)}</a></td><td>${o.status}</td><td>${when(o.at, data.now)}</td></tr>`)}</table>`;
}

function feed(ctx: PageContext, data: OverviewData): Html {
  const h = data.horizon;
  const holders =
    h.holders === null
      ? html`<p class="muted" id="horizon-holders">This login may not read settle.feed_horizon, which names the transactions holding it.</p>`
      : h.holders.length === 0
        ? html`<p class="muted" id="horizon-holders">No open transaction holds it: every transaction with an id has ended.</p>`
        : html`<table id="horizon-holders"><caption>Open transactions holding the feed back, oldest first (ids are cluster-wide: any database's sessions)</caption>
<tr><th>pid</th><th>login</th><th>application</th><th>state</th><th>transaction</th><th class="num">open for</th><th>feed consumer</th></tr>
${h.holders.map(
  (
    x,
  ) => html`<tr${x.holds_horizon ? html` class="holds"` : ''}><td class="mono">${x.pid ?? 'prepared'}</td><td class="mono">${x.login ?? html`<span class="muted">not shown to a tenant-bound login</span>`}</td>
<td class="mono">${x.application_name ?? ''}</td><td>${x.state ?? html`<span class="muted">not readable</span>`}</td><td class="mono">${x.xid}${x.holds_horizon ? html` <span class="badge warn">holds the horizon</span>` : ''}</td>
<td class="num">${x.xact_age_seconds === null ? '?' : age(x.xact_age_seconds)}</td><td class="mono">${x.feed_consumer ? `${x.consumer ?? '?'}${x.lane === null ? '' : ` lane ${x.lane + 1}`}` : ''}</td></tr>`,
)}</table>`;
  const lanes =
    data.lanes === null
      ? html`<p class="muted">This login may not read settle.feed_consumers.</p>`
      : data.lanes.length === 0
        ? html`<p class="muted">No feed consumer is registered.</p>`
        : html`<table id="feed-lanes"><tr><th>consumer</th><th>lane</th><th>position</th><th>leased</th><th class="num">lag (events)</th><th class="num">lag (s)</th><th>oldest unacknowledged</th><th>last ack</th>${ctx.caps.act.resetConsumer ? html`<th></th>` : ''}</tr>
${data.lanes.map(
  (
    l,
  ) => html`<tr><td class="mono">${ident(l.consumer)}</td><td>${l.lane + 1}/${l.lanes}</td><td class="mono">${l.position}</td><td>${l.leased ? 'yes' : 'no'}</td>
<td class="num" data-live="lag-events" data-consumer="${l.consumer}" data-lane="${l.lane}">${l.lag_events}</td><td class="num" data-live="lag-seconds" data-consumer="${l.consumer}" data-lane="${l.lane}">${l.lag_seconds.toFixed(1)}</td>
<td>${when(l.oldest_unacked_at, data.now)}</td><td>${when(l.acked_at, data.now)}</td>
${ctx.caps.act.resetConsumer ? html`<td>${l.lane === 0 ? html`<form method="post" action="/actions/reset-consumer" class="inline">${csrfField(ctx)}<input type="hidden" name="consumer" value="${l.consumer}"><input type="hidden" name="step" value="form"><button class="secondary" type="submit">Reset ${l.consumer}…</button></form>` : ''}</td>` : ''}</tr>`,
)}</table>`;
  return html`<h2>Settlement feed</h2>${lanes}
<p id="horizon">Feed horizon: transaction id <span class="mono" data-live="horizon">${h.xid}</span> (the events of transactions from there on wait until every older transaction has ended)</p>
${holders}`;
}

function upkeep(data: OverviewData): Html {
  if (data.upkeep === null) return html`<h2>Upkeep</h2><p class="muted">This login may not read settle.upkeep.</p>`;
  return html`<h2>Upkeep</h2><table id="upkeep"><tr><th>job</th><th>every</th><th>last run</th><th>last result</th><th>by</th><th class="num">runs</th><th class="num">failures</th><th>next due</th><th></th></tr>
${data.upkeep.map(
  (
    u,
  ) => html`<tr><td>${u.job}</td><td>${u.every}</td><td>${when(u.last_finished_at ?? u.last_started_at, data.now)}</td>
<td>${u.last_ok === null ? html`<span class="muted">never ran</span>` : u.last_ok ? html`<span class="badge ok">ok</span>` : html`<span class="badge bad">failed</span> ${u.last_error ?? ''}`}</td>
<td class="mono">${u.last_by ?? ''}</td><td class="num">${u.runs}</td><td class="num">${u.failures}</td><td>${u.next_due_at.toISOString().replace('T', ' ').slice(0, 19)}</td>
<td>${u.overdue ? html`<span class="badge bad">overdue</span>` : html`<span class="badge ok">on time</span>`}</td></tr>`,
)}</table>`;
}

function alerts(data: OverviewData): Html {
  if (data.metrics === null)
    return html`<h2>Alerts</h2><p class="muted">This login may not read settle.metrics: the alerts of docs/observability.md cannot be judged here.</p>`;
  const states = evaluateAlerts(data.metrics);
  return html`<h2>Alerts <span class="muted">(docs/observability.md, judged on settle.metrics now)</span></h2>
<table id="alerts"><tr><th>alert</th><th>severity</th><th>condition</th><th class="num">now</th><th>state</th></tr>
${states.map(
  (
    a,
  ) => html`<tr><td>${a.name}</td><td>${a.severity}</td><td class="mono">${a.condition}</td><td class="num">${a.value === null ? '' : Number.isInteger(a.value) ? a.value : a.value.toFixed(1)}</td>
<td>${a.firing === null ? html`<span class="muted">needs Prometheus history</span>` : a.firing ? html`<span class="badge firing">condition holds</span>` : html`<span class="badge ok">ok</span>`}</td></tr>`,
)}
</table>
<p class="muted">From an application's metrics, not visible in the database: ${CLIENT_RULES.join(', ')}. Live leases ${num(data.metrics.operations_in_flight)}, lapsed ${num(data.metrics.lapsed_leases)}.</p>`;
}

function actions(ctx: PageContext): Html {
  if (!ctx.caps.act.expireLeases) return html``;
  return html`<h2>Actions</h2><form method="post" action="/actions/expire-leases">${csrfField(ctx)}<input type="hidden" name="step" value="form"><button class="secondary" type="submit">Expire lapsed leases…</button></form>`;
}

export function overviewPage(ctx: PageContext, data: OverviewData): string {
  return page(
    ctx,
    'Overview',
    html`<h1>Overview <span class="muted">· updated <span data-live="updated">${data.now.toISOString().slice(11, 19)} UTC</span></span></h1>
<h2>Operations reaching a status, per minute, last hour</h2>
${throughputChart(data.minutes, data.now)}
<h2>Waiting for someone</h2>
${tiles(data)}
${
  data.deadLetters.every((d) => d.n === 0)
    ? ''
    : html`<p><a href="/dead-letters" id="by-error-code">Dead letters by error code</a></p><table id="dead-letters"><tr><th>dead-letter reason</th><th class="num">count</th><th>oldest</th><th>newest</th></tr>
${data.deadLetters.filter((d) => d.n > 0).map((d) => html`<tr><td><a href="${href('/search', { reason: d.reason ?? '' })}">${d.reason ?? 'none'}</a></td><td class="num">${d.n > COUNT_CAP ? `${COUNT_CAP}+` : d.n}</td><td>${when(d.oldest, data.now)}</td><td>${when(d.newest, data.now)}</td></tr>`)}</table>`
}
${oldest(data)}
${feed(ctx, data)}
${upkeep(data)}
${alerts(data)}
${actions(ctx)}`,
    { refreshSeconds: 30 },
  );
}
