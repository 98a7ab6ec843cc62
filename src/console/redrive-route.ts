import { z } from 'zod';
import { answerPage, confirmPage, refusalPage } from './action-pages.js';
import { redriveAction } from './actions.js';
import type { ConsoleDatabase } from './database.js';
import { href, html, type Html, ident } from './escape.js';
import { answerReply, pageReply, type Reply } from './http.js';
import type { PageContext } from './layout.js';

// Redriving one dead letter (settle.redrive). A dead letter that needs reconciliation is one
// where an attempt may already have taken effect: its next claim runs the effect again. The
// console says so, offers resolving it first, and redrives it only with a reason and the
// operator's word that the downstream shows no effect (or deduplicates by the key), as
// `pg-settle redrive --all` skips these on purpose.

/** Why redriving a needs_reconciliation dead letter may repeat its effect. */
export const MAY_REPEAT =
  'An attempt of this operation may already have taken effect (dead letter reason needs_reconciliation): a redrive re-opens it and its next claim runs the effect again, which may then happen twice.';

const CHECKED_DOWNSTREAM =
  'I checked the downstream: no attempt took effect, or it deduplicates the effect by this key';

/** The dead-letter reason of an operation the login can see (null: not a dead letter, or not visible). */
export async function deadLetterReason(db: ConsoleDatabase, tenant: string, key: string): Promise<string | null> {
  const [row] = await db.rows(
    z.object({ reason: z.string().nullable() }),
    'select d.reason from settle.dead_letters d where d.tenant = $1 and d.key = $2',
    [tenant, key],
  );
  return row?.reason ?? null;
}

/** The fields the redrive form of a needs_reconciliation dead letter adds: the warning, the acknowledgement. */
export function mayRepeatFields(): Html {
  return html`<p class="answer refused" id="redrive-warning"><b>The effect may repeat.</b> ${MAY_REPEAT} Resolve it instead once the downstream says what happened.</p>
<label><input type="checkbox" name="checked_downstream" value="yes" id="checked-downstream" required> ${CHECKED_DOWNSTREAM}</label>`;
}

export async function redriveRoute(
  db: ConsoleDatabase,
  form: URLSearchParams,
  ctx: PageContext,
  step: string,
): Promise<Reply> {
  const tenant = form.get('tenant') ?? '';
  const key = form.get('key') ?? '';
  const opHref = href('/op', { tenant, key });
  const attempts = form.get('attempts') ?? '1';
  if (!/^\d{1,4}$/.test(attempts) || Number(attempts) < 1 || Number(attempts) > 1000)
    return pageReply(400, refusalPage(ctx, 'Redrive', 'additional attempts must be a whole number from 1 to 1000'));
  const reason = form.get('reason')?.trim() ?? '';
  const mayRepeat = (await deadLetterReason(db, tenant, key)) === 'needs_reconciliation';
  if (mayRepeat) {
    const problems = [
      reason === '' ? 'a reason is required: why the effect cannot repeat, and the ticket' : null,
      form.get('checked_downstream') === 'yes' ? null : `tick "${CHECKED_DOWNSTREAM}"`,
    ].filter((p): p is string => p !== null);
    if (problems.length > 0)
      return pageReply(
        400,
        answerPage(
          ctx,
          'Redrive',
          { ok: false, summary: `not redriven: ${problems.join('; ')}. ${MAY_REPEAT}`, fields: [], error: null },
          `${opHref}#resolve-form`,
          'Back to the operation (resolve it instead)',
        ),
      );
  }
  if (step !== 'apply') {
    return pageReply(
      200,
      confirmPage(
        ctx,
        'Confirm redrive',
        '/actions/redrive',
        html`<p>Re-open <b class="mono">${ident(tenant)}</b> / <b class="mono">${ident(key)}</b> with ${attempts} more attempt(s). Its next claim runs it again.</p>
${mayRepeat ? html`<p class="answer refused" id="redrive-warning"><b>The effect may repeat.</b> ${MAY_REPEAT} <a href="${opHref}#resolve-form" id="resolve-first">Resolve it instead</a>.</p>` : ''}
${reason === '' ? '' : html`<p>reason: <b>${reason}</b></p>`}`,
        { tenant, key, attempts, reason, ...(mayRepeat ? { checked_downstream: 'yes' } : {}) },
        mayRepeat ? 'Redrive: the effect may repeat' : 'Redrive',
        opHref,
      ),
    );
  }
  const answer = await redriveAction(db, tenant, key, Number(attempts), reason === '' ? null : reason);
  return answerReply(answer.ok ? 200 : 409, answerPage(ctx, 'Redrive', answer, opHref, 'Back to the operation'));
}
