import { answerPage, confirmPage, refusalPage } from './action-pages.js';
import { resetConsumer, type ResetRow } from './actions.js';
import type { ConsoleDatabase } from './database.js';
import { html, type Html, ident } from './escape.js';
import { answerReply, pageReply, type Reply } from './http.js';
import { csrfField, page, when, type PageContext } from './layout.js';
import { readLanes, type LaneRow } from './overview-data.js';

// Resetting a feed consumer (settle.reset_consumer): moving a lane back delivers retained events
// again (the downstream deduplicates by event_id), moving it forward skips events the consumer
// has not acknowledged, which it then never receives. The form's default moves back (nothing is
// lost); the preview counts both, per lane, and a skip needs an explicit acknowledgement.

/** `to`: earliest (every retained event), now (skip everything committed) or an ISO 8601 time. */
type Target = 'earliest' | 'now' | string;

const ISO_TIME = /^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d{1,6})?)?(Z|[+-]\d{2}(:?\d{2})?)?$/;

/** The target of a form (to, and at for a time; a time without a zone is UTC), or what is wrong. */
export function resetTargetOf(form: URLSearchParams): Target | { problem: string } {
  const to = form.get('to') ?? 'earliest';
  if (to === 'earliest' || to === 'now') return to;
  const at = (to === 'time' ? (form.get('at') ?? '') : to).trim();
  if (!ISO_TIME.test(at))
    return { problem: 'the time must be an ISO 8601 time (2026-12-01T10:00, UTC unless a zone is given)' };
  const zoned = /(Z|[+-]\d{2}(:?\d{2})?)$/.test(at) ? at : `${at}Z`;
  const parsed = new Date(zoned.replace(' ', 'T'));
  if (Number.isNaN(parsed.getTime())) return { problem: `${at} is not a valid time` };
  return parsed.toISOString();
}

function position(text: string): [bigint, bigint] {
  const [xid = '0', id = '0'] = text.split('/');
  return [BigInt(xid), BigInt(id)];
}

function isForward(row: ResetRow): boolean {
  const [bx, bi] = position(row.position_before);
  const [ax, ai] = position(row.position_after);
  return ax > bx || (ax === bx && ai > bi);
}

export interface LaneEffect {
  readonly row: ResetRow;
  /** Unacknowledged events the move passes over (null: the login may not read the lanes). */
  readonly skipped: number | null;
  /** Events delivered again that the lane had passed already. */
  readonly again: number;
  readonly lane: LaneRow | undefined;
}

/** What a reset does to each lane: skipped = lag before − events after, on a forward move. */
export function laneEffects(rows: readonly ResetRow[], lanes: readonly LaneRow[] | null): LaneEffect[] {
  return rows.map((row) => {
    const lane = lanes?.find((l) => l.lane === row.lane);
    const lag = lane?.lag_events;
    const forward = isForward(row);
    return {
      row,
      lane,
      skipped: forward ? (lag === undefined ? null : Math.max(0, lag - row.events_to_deliver)) : 0,
      again: forward || lag === undefined ? 0 : Math.max(0, row.events_to_deliver - lag),
    };
  });
}

function describe(to: Target): string {
  return to === 'now' ? 'skip to now' : to === 'earliest' ? 'deliver every retained event again' : `deliver from ${to}`;
}

function effectTable(effects: readonly LaneEffect[], now: Date): Html {
  return html`<table id="reset-lanes"><tr><th>lane</th><th>position before</th><th>position after</th><th class="num">events to deliver</th><th class="num">unacknowledged events skipped</th><th>oldest unacknowledged</th></tr>
${effects.map((e) => html`<tr><td>${e.row.lane + 1}</td><td class="mono">${e.row.position_before}</td><td class="mono">${e.row.position_after}</td><td class="num">${e.row.events_to_deliver}</td><td class="num${e.skipped !== null && e.skipped > 0 ? ' bad' : ''}">${e.skipped ?? '?'}</td><td>${when(e.lane?.oldest_unacked_at ?? null, now)}</td></tr>`)}</table>`;
}

export async function resetConsumerRoute(
  db: ConsoleDatabase,
  form: URLSearchParams,
  ctx: PageContext,
  step: string,
): Promise<Reply> {
  const consumer = form.get('consumer') ?? '';
  if (step === 'form') return pageReply(200, resetForm(ctx, consumer));
  const to = resetTargetOf(form);
  if (typeof to !== 'string') return pageReply(400, refusalPage(ctx, 'Reset consumer', to.problem));
  // The lanes first: their lag is what a forward move skips.
  const lanes = (await readLanes(db, ctx.caps))?.filter((l) => l.consumer === consumer) ?? null;
  const preview = await resetConsumer(db, consumer, to, true);
  if ('error' in preview)
    return pageReply(
      409,
      answerPage(
        ctx,
        'Reset consumer',
        { ok: false, summary: 'reset refused', fields: [], error: preview.error },
        '/',
        'Overview',
      ),
    );
  const effects = laneEffects(preview.rows, lanes);
  const total = preview.rows.reduce((n, r) => n + r.events_to_deliver, 0);
  const skipped = effects.reduce<number | null>((n, e) => (n === null || e.skipped === null ? null : n + e.skipped), 0);
  const skips = skipped === null || skipped > 0;
  const now = new Date();
  if (step !== 'apply' || (skips && form.get('skip_ok') !== 'yes')) {
    const warning = skips
      ? html`<p class="answer refused" id="skip-warning"><b>${skipped === null ? 'An unknown number of' : html`<span id="skipped">${skipped}</span>`} unacknowledged event(s) will be skipped:</b> <span class="mono">${ident(consumer)}</span> never receives them (the counts come from settle.feed_consumers, at most 1,000 per key slot). To deliver them, choose an earlier time or every retained event.</p>`
      : html`<p id="skip-warning">Nothing is skipped: every event the consumer has not acknowledged is still delivered${total > 0 ? ', and the ones it had passed are delivered again (the downstream deduplicates them by event_id)' : ''}.</p>`;
    const fields = skips
      ? html`<label><input type="checkbox" name="skip_ok" value="yes" id="skip-ok" required> I accept that ${skipped ?? 'these'} unacknowledged event(s) are never delivered to ${consumer}</label>`
      : html``;
    return pageReply(
      step === 'apply' ? 400 : 200,
      confirmPage(
        ctx,
        'Confirm: reset consumer',
        '/actions/reset-consumer',
        html`${step === 'apply' ? html`<p class="answer refused" id="problem">Not reset: tick the acknowledgement to skip events.</p>` : ''}<p>Move every lane of <b class="mono">${ident(consumer)}</b> (${describe(to)}): <b id="to-deliver">${total}</b> event(s) would be delivered.</p>${warning}${effectTable(effects, now)}`,
        { consumer, to },
        skips ? `Reset and skip ${skipped ?? 'events'}` : 'Reset consumer',
        '/',
        fields,
      ),
    );
  }
  const applied = await resetConsumer(db, consumer, to, false);
  if ('error' in applied)
    return answerReply(
      409,
      answerPage(
        ctx,
        'Reset consumer',
        { ok: false, summary: 'reset refused', fields: [], error: applied.error },
        '/',
        'Overview',
      ),
    );
  const done = laneEffects(applied.rows, lanes);
  const delivered = applied.rows.reduce((n, r) => n + r.events_to_deliver, 0);
  const passed = done.reduce<number | null>((n, e) => (n === null || e.skipped === null ? null : n + e.skipped), 0);
  return answerReply(
    200,
    answerPage(
      ctx,
      'Reset consumer',
      {
        ok: true,
        summary: `reset ${consumer} (${describe(to)}): ${delivered} event(s) to deliver, ${passed ?? 'an unknown number of'} unacknowledged event(s) skipped`,
        fields: done.map((e) => [
          `lane ${e.row.lane + 1}`,
          `${e.row.position_before} → ${e.row.position_after} (${e.row.events_to_deliver} to deliver, ${e.skipped ?? '?'} skipped)`,
        ]),
        error: null,
      },
      '/',
      'Overview',
    ),
  );
}

function resetForm(ctx: PageContext, consumer: string): string {
  return page(
    ctx,
    'Reset consumer',
    html`<h1>Reset consumer <span class="mono">${ident(consumer)}</span></h1>
<form method="post" action="/actions/reset-consumer" id="reset-form">${csrfField(ctx)}<input type="hidden" name="consumer" value="${consumer}"><input type="hidden" name="step" value="confirm">
<fieldset><legend>Move every lane to</legend>
<label><input type="radio" name="to" value="earliest" checked> every retained event: deliver again what it has not acknowledged and what it has (nothing is skipped; the downstream deduplicates by event_id)</label>
<label><input type="radio" name="to" value="time"> the first event written at or after a time (events before it that it has not acknowledged are skipped):</label>
<input type="text" name="at" id="reset-at" placeholder="2026-12-01T10:00 (UTC)" size="28" aria-label="time to deliver from (ISO 8601, UTC unless a zone is given)">
<label><input type="radio" name="to" value="now"> now: skip everything committed (every unacknowledged event is skipped, never delivered)</label>
</fieldset>
<p><button type="submit">Preview…</button> <a href="/">Cancel</a></p></form>`,
  );
}
