import { BULK_LIMIT, type DeadLetterGroup, GROUPED } from './dead-letter-data.js';
import { href, html, ident, type Html } from './escape.js';
import { csrfField, page, when, type PageContext } from './layout.js';

// The dead letters by reason and error code, with counts: after an outage, which failures and how
// many, a list of each group, and (for a group whose every attempt failed) one redrive for all.

function codeText(code: string | null): Html {
  return code === null ? html`<span class="muted">(no error)</span>` : html`<span class="mono">${ident(code)}</span>`;
}

function groupActions(ctx: PageContext, g: DeadLetterGroup, tenant: string | null): Html {
  const list = html`<a href="${href('/search', { reason: g.reason, code: g.code ?? undefined, tenant: tenant ?? undefined })}">list</a>`;
  if (g.reason !== 'attempts_exhausted')
    return html`${list} <span class="muted">· one at a time, after checking the downstream (an effect may have happened)</span>`;
  if (!ctx.caps.act.redrive) return list;
  return html`${list} <form method="post" action="/actions/redrive-group" class="inline">${csrfField(ctx)}<input type="hidden" name="step" value="confirm">
<input type="hidden" name="reason_group" value="${g.reason}"><input type="hidden" name="code_json" value="${JSON.stringify(g.code)}">${tenant === null ? '' : html`<input type="hidden" name="tenant" value="${tenant}">`}
<button class="secondary" type="submit">Redrive ${g.n > GROUPED ? `${GROUPED}+` : g.n}…</button></form>`;
}

export function deadLettersPage(ctx: PageContext, groups: readonly DeadLetterGroup[], tenant: string | null): string {
  const now = new Date();
  const capped = [...new Set(groups.filter((g) => g.read >= GROUPED).map((g) => g.reason))];
  return page(
    ctx,
    'Dead letters',
    html`<h1>Dead letters <span class="muted">by reason and error code</span></h1>
<form method="get" action="/dead-letters" class="filters" id="dead-letters-form"><div><label for="dl-tenant">tenant (exact; empty: every tenant this login sees)</label><input type="text" name="tenant" id="dl-tenant" value="${tenant ?? ''}"></div><div><button type="submit">Show</button></div></form>
${
  groups.length === 0
    ? html`<p class="muted" id="no-dead-letters">No dead letter visible to this login${tenant === null ? '' : html` for tenant <span class="mono">${ident(tenant)}</span>`}.</p>`
    : html`<table id="dead-letter-groups"><tr><th>reason</th><th>error code</th><th class="num">dead letters</th><th>oldest</th><th>newest</th><th></th></tr>
${groups.map((g) => html`<tr><td>${g.reason}</td><td>${codeText(g.code)}</td><td class="num">${g.n}</td><td>${when(g.oldest, now)}</td><td>${when(g.newest, now)}</td><td>${groupActions(ctx, g, tenant)}</td></tr>`)}</table>`
}
${capped.length === 0 ? '' : html`<p class="muted" id="grouped-over">Grouped over the oldest ${GROUPED.toLocaleString('en')} dead letters of ${capped.join(' and ')}: there are more.</p>`}
<p class="muted">A group's redrive re-opens its oldest ${BULK_LIMIT.toLocaleString('en')} at most (run it again for the rest), each with settle.redrive under your login, after a preview that needs a reason. Dead letters that need reconciliation are redriven one at a time from their page: an attempt may already have taken effect (<code>pg-settle redrive --all</code> skips them too).</p>`,
    { refreshSeconds: 30 },
  );
}

/** The confirmation of a group's redrive: how many, the first keys, the reason and attempts to fill in. */
export function groupRedrivePreview(
  ctx: PageContext,
  selection: { readonly code: string | null; readonly tenant: string | null },
  total: number,
  keys: readonly { tenant: string; key: string }[],
  problem: string | null,
): string {
  const runs = Math.min(total, BULK_LIMIT);
  return page(
    ctx,
    'Redrive a group',
    html`<h1>Redrive dead letters: attempts_exhausted, ${codeText(selection.code)}${selection.tenant === null ? '' : html`, tenant <span class="mono">${ident(selection.tenant)}</span>`}</h1>
${problem === null ? '' : html`<p class="answer refused" id="problem">${problem}</p>`}
<div class="confirm" id="confirm"><p><b id="group-total">${total > GROUPED ? `${GROUPED.toLocaleString('en')}+` : total}</b> dead letter(s) in this group; this redrives the oldest <b id="group-runs">${runs}</b>${total > runs ? ' (run it again for the rest)' : ''}: each re-opens as pending with more attempts, and its next claim runs it again.</p>
<p>The first of them:</p><ul id="group-keys">${keys.slice(0, 10).map((k) => html`<li><a class="mono" href="${href('/op', k)}">${ident(k.tenant)} / ${ident(k.key)}</a></li>`)}</ul></div>
<form method="post" action="/actions/redrive-group" id="confirm-form">${csrfField(ctx)}<input type="hidden" name="step" value="apply">
<input type="hidden" name="reason_group" value="attempts_exhausted"><input type="hidden" name="code_json" value="${JSON.stringify(selection.code)}">${selection.tenant === null ? '' : html`<input type="hidden" name="tenant" value="${selection.tenant}">`}
<label for="group-attempts">additional attempts each</label><input type="number" name="attempts" id="group-attempts" min="1" max="1000" value="1">
<label for="group-reason">reason (required: why, and the ticket; kept in each audit row)</label><input type="text" name="reason" id="group-reason" size="60" required>
<p><button type="submit" class="danger">Redrive ${runs} dead letter(s)</button> <a href="/dead-letters">Cancel</a></p></form>`,
  );
}
