import type { Capabilities } from './capabilities.js';
import { html, ident, type Html } from './escape.js';

export interface PageContext {
  readonly caps: Capabilities;
  readonly csrf: string;
}

/** The hidden CSRF field every form carries. */
export function csrfField(ctx: PageContext): Html {
  return html`<input type="hidden" name="csrf" value="${ctx.csrf}">`;
}

function who(caps: Capabilities): Html {
  const names: Record<keyof Capabilities['act'], string> = {
    resolve: 'resolve',
    redrive: 'redrive',
    expireLeases: 'expire leases',
    resetConsumer: 'reset consumers',
  };
  const acts = (Object.keys(names) as (keyof Capabilities['act'])[])
    .filter((name) => caps.act[name])
    .map((name) => names[name]);
  return html`login <b class="mono">${caps.login}</b> (${caps.roles.length === 0 ? 'no settle role' : caps.roles.join(', ')})${caps.tenants === null ? '' : html`, <span id="who-tenants">${caps.tenants.length === 0 ? 'bound to no tenant' : html`tenants ${caps.tenants.map((t, i) => html`${i === 0 ? '' : ', '}<span class="mono">${ident(t)}</span>`)}`}</span>`} · ${acts.length === 0 ? html`<span class="badge" id="read-only">read-only</span>` : html`can ${acts.join(', ')}`}`;
}

export function page(
  ctx: PageContext | null,
  title: string,
  body: Html,
  options: { readonly refreshSeconds?: number } = {},
): string {
  const header =
    ctx === null
      ? html`<header><a href="/">pg-settle console</a></header>`
      : html`<header><a href="/">pg-settle console</a><a href="/">Overview</a><a href="/search">Search</a><a href="/dead-letters">Dead letters</a>${ctx.caps.read.adminLog ? html`<a href="/admin-log">Admin log</a>` : ''}
<span class="who">${who(ctx.caps)}</span>
<form method="post" action="/logout">${csrfField(ctx)}<button class="secondary" type="submit">Sign out</button></form></header>`;
  // Every page: when it was read, a link that reads it again, and (script) a copy of its address
  // and an automatic refresh. The address names everything the page shows: a colleague opens it
  // on their own console (signing in first if need be, then on to it).
  const tools =
    ctx === null
      ? ''
      : html`<p class="page-tools" id="page-tools">read <time id="read-at" datetime="${new Date().toISOString()}">${new Date().toISOString().slice(11, 19)} UTC</time> · <a href="" id="refresh">Refresh</a></p>`;
  return html`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>${title} · pg-settle console</title><link rel="stylesheet" href="/static/console.css"></head>
<body${options.refreshSeconds === undefined ? '' : html` data-refresh="${options.refreshSeconds}"`}>
${header}
<main>
${tools}
${body}
</main>
<script src="/static/console.js"></script>
</body></html>
`.text;
}

/** A date as an ISO string without milliseconds, with its age. */
export function when(at: Date | null, now: Date = new Date()): Html {
  if (at === null) return html`<span class="muted">-</span>`;
  return html`<time datetime="${at.toISOString()}">${at.toISOString().replace('T', ' ').slice(0, 19)}</time> <span class="muted">(${age((now.getTime() - at.getTime()) / 1000)} ago)</span>`;
}

/** Seconds as a short human age: 45 s, 12 min, 3.5 h, 2.1 d. */
export function age(seconds: number): string {
  const s = Math.max(0, seconds);
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 172_800) return `${(s / 3600).toFixed(1)} h`;
  return `${(s / 86_400).toFixed(1)} d`;
}
