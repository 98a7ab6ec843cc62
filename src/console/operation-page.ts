import { href, html, type Html, ident } from './escape.js';
import { jsonBlock, jsonHref } from './json-block.js';
import { csrfField, page, when, type PageContext } from './layout.js';
import type { OperationData } from './operation-data.js';
import { mayRepeatFields } from './redrive-route.js';
import { attemptTimeline } from './svg.js';

function lattice(statuses: readonly string[], current: string): Html {
  const at = statuses.indexOf(current);
  return html`<ol class="lattice" id="lattice">${statuses.map((s, i) => html`<li class="${s === current ? 'current' : i < at ? 'passed' : ''}">${s}</li>`)}</ol>`;
}

function field(name: string, value: Html | string | number | null): Html {
  return html`<tr><th>${name}</th><td>${value === null ? html`<span class="muted">-</span>` : value}</td></tr>`;
}

function json(value: unknown, op?: { readonly tenant: string; readonly key: string }, field?: string): Html {
  return jsonBlock(value, op === undefined || field === undefined ? null : jsonHref(op.tenant, op.key, field));
}

function actions(ctx: PageContext, data: OperationData): Html {
  const op = data.operation;
  const forms: Html[] = [];
  const hidden = html`${csrfField(ctx)}<input type="hidden" name="tenant" value="${op.tenant}"><input type="hidden" name="key" value="${op.key}">`;
  if (ctx.caps.act.resolve && (op.status === 'unknown' || op.status === 'conflict')) {
    forms.push(html`<form method="post" action="/actions/resolve" id="resolve-form">${hidden}
<input type="hidden" name="step" value="confirm"><input type="hidden" name="expected_attempt" value="${op.attempt}"><input type="hidden" name="fingerprint" value="${op.fingerprint}">
<fieldset><legend>Resolve (you are looking at attempt ${op.attempt}, status ${op.status})</legend>
<label><input type="radio" name="outcome" value="completed" checked> completed: the downstream confirms the effect, with its result</label>
<label><input type="radio" name="outcome" value="failed"> failed: the downstream proves no attempt took effect, with the error clients will read</label>
<label for="result">result or error (JSON)</label><textarea name="payload" id="result" required>{}</textarea>
<label for="reason">reason (required: why, and the ticket)</label><input type="text" name="reason" id="reason" size="60" required>
<label for="evidence">evidence (JSON: what you checked)</label><textarea name="evidence" id="evidence">{}</textarea>
<p><button type="submit">Review resolution…</button></p></fieldset></form>`);
  }
  if (ctx.caps.act.redrive && op.dead_lettered_at !== null) {
    const mayRepeat = op.dead_letter_reason === 'needs_reconciliation';
    forms.push(html`<form method="post" action="/actions/redrive" id="redrive-form">${hidden}<input type="hidden" name="step" value="confirm">
<fieldset><legend>Redrive (re-open with more attempts)</legend>
${mayRepeat ? mayRepeatFields() : ''}
<label for="redrive-attempts">additional attempts</label><input type="number" name="attempts" id="redrive-attempts" min="1" max="1000" value="1">
<label for="redrive-reason">reason${mayRepeat ? ' (required: why the effect cannot repeat, and the ticket)' : ''}</label><input type="text" name="reason" id="redrive-reason" size="60"${mayRepeat ? html` required` : ''}>
<p><button type="submit"${mayRepeat ? html` class="danger"` : ''}>Review redrive…</button></p></fieldset></form>`);
  }
  if (forms.length === 0) return html``;
  return html`<h2>Actions</h2>${forms}`;
}

export function operationPage(ctx: PageContext, data: OperationData): string {
  const op = data.operation;
  return page(
    ctx,
    `${op.tenant} / ${op.key}`,
    html`<h1>Operation <span class="mono" id="op-tenant" data-copy="${op.tenant}" data-copy-name="tenant">${ident(op.tenant)}</span> / <span class="mono" id="op-key" data-copy="${op.key}" data-copy-name="key">${ident(op.key)}</span></h1>
${lattice(data.statuses, op.status)}
<table id="operation">
${field('status', html`<b id="op-status">${op.status}</b>${op.in_flight ? html` <span class="badge warn">in flight</span>` : ''}${op.dead_lettered_at === null ? '' : html` <span class="badge bad">dead-lettered: ${op.dead_letter_reason ?? ''}</span>`}`)}
${field('attempt', html`<span id="op-attempt">${op.attempt}</span> of ${op.max_attempts}${op.settled_attempt === null ? '' : html`, settled by attempt ${op.settled_attempt}`}`)}
${field('lease expires', when(op.lease_expires_at, data.now))}
${field('result', html`<div id="op-result">${json(op.result, op, 'result')}</div>`)}
${field('error', json(op.error, op, 'error'))}
${field('dead-lettered', when(op.dead_lettered_at, data.now))}
${field('redrives', op.redrive_count)}
${field('created', when(op.created_at, data.now))}
${field('updated', when(op.updated_at, data.now))}
</table>
<h2>Reservation</h2>
<table id="reservation">
${field('fingerprint', html`<code id="op-fingerprint" data-copy="${op.fingerprint}" data-copy-name="fingerprint">${op.fingerprint}</code>`)}
${field('principal', html`<code>${op.principal}</code>`)}
${field('scopes', html`<code>${op.scopes.join(', ')}</code>`)}
${field('binding generation', op.binding_generation)}
${field('request', json(op.request, op, 'request'))}
</table>
<h2>Attempts</h2>
${attemptTimeline(op, data.attempts, data.audit, data.now)}
<table id="attempts"><tr><th>attempt</th><th>worker</th><th>claimed</th><th>ended</th><th>end reason</th><th>observation</th><th>settled</th><th>error</th><th>late result</th></tr>
${data.attempts.map((a) => html`<tr><td>${a.attempt}</td><td class="mono">${a.worker ?? ''}</td><td>${when(a.claimed_at, data.now)}</td><td>${when(a.ended_at, data.now)}</td><td>${a.end_reason ?? ''}</td><td>${a.observation ?? ''}</td><td>${a.settled ? 'yes' : ''}</td><td>${json(a.error, op, `attempt:${a.attempt}:error`)}</td><td>${json(a.late_result, op, `attempt:${a.attempt}:late_result`)}</td></tr>`)}
</table>
<h2>Audit trail</h2>
${
  data.audit === null
    ? html`<p class="muted">This login may not read settle.audit_log.</p>`
    : html`<table id="audit"><tr><th>#</th><th>at</th><th>event</th><th>outcome</th><th>attempt</th><th>status</th><th>actor</th><th>login</th><th>detail (reason, evidence)</th></tr>
${data.audit.map((r) => html`<tr><td>${r.seq}</td><td>${when(r.at, data.now)}</td><td>${r.event}</td><td>${r.outcome}</td><td>${r.attempt ?? ''}</td><td>${r.status_before ?? ''} → ${r.status_after ?? ''}</td><td class="mono">${r.actor ?? ''}</td><td class="mono">${r.login ?? ''}</td><td>${json(r.detail, op, `audit:${r.seq}:${r.audit_id}`)}</td></tr>`)}
</table>`
}
<h2>Feed events</h2>
${
  data.feed === null
    ? html`<p class="muted">This login may not read settle.feed_events.</p>`
    : data.feed.length === 0
      ? html`<p class="muted" id="feed-events">No feed event (the operation has not reached completed or failed, or its events were trimmed after every consumer acknowledged them).</p>`
      : html`<table id="feed-events"><tr><th>event</th><th>position</th><th>outcome</th><th>attempt</th><th>written</th><th>acknowledged by</th><th>not yet by</th></tr>
${data.feed.map((e) => html`<tr><td>${e.event_id}</td><td class="mono">${e.position}</td><td>${e.status_before} → ${e.status}</td><td>${e.attempt}</td><td>${when(e.occurred_at, data.now)}</td><td class="mono">${e.acked_by.join(', ')}</td><td class="mono">${e.pending_for.join(', ')}</td></tr>`)}
</table>`
}
${actions(ctx, data)}
<p><a href="${href('/search', { tenant: op.tenant })}">Other operations of this tenant</a></p>`,
  );
}
