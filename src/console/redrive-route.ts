import { z } from 'zod';
import { answerPage, confirmPage, refusalPage } from './action-pages.js';
import { redriveAction } from './actions.js';
import { BULK_LIMIT, type GroupSelection, groupKeys } from './dead-letter-data.js';
import { groupRedrivePreview } from './dead-letters-page.js';
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

/** The group a bulk redrive names (only attempts_exhausted), or what is wrong with the form. */
function groupOf(form: URLSearchParams): GroupSelection | { problem: string } {
  if (form.get('reason_group') !== 'attempts_exhausted')
    return {
      problem:
        'only dead letters whose every attempt failed (attempts_exhausted) are redriven as a group; the ones needing reconciliation one at a time',
    };
  let code: unknown;
  try {
    code = JSON.parse(form.get('code_json') ?? '');
  } catch {
    return { problem: 'the form does not say which error code (reload the dead letters page)' };
  }
  if (code !== null && typeof code !== 'string')
    return { problem: 'the form does not say which error code (reload the dead letters page)' };
  const tenant = form.get('tenant');
  return { reason: 'attempts_exhausted', code, tenant: tenant === null || tenant === '' ? null : tenant };
}

/**
 * Redriving one group of dead letters (dead-letter-data.ts): a preview with the count and the
 * first keys that needs a reason, then settle.redrive for each of the oldest BULK_LIMIT in turn,
 * under the operator's login. One a colleague redrove or purged meanwhile counts as skipped.
 */
export async function redriveGroupRoute(
  db: ConsoleDatabase,
  form: URLSearchParams,
  ctx: PageContext,
  step: string,
): Promise<Reply> {
  const group = groupOf(form);
  if ('problem' in group) return pageReply(400, refusalPage(ctx, 'Redrive a group', group.problem));
  const attempts = form.get('attempts') ?? '1';
  const reason = form.get('reason')?.trim() ?? '';
  const problems =
    step === 'apply'
      ? [
          /^\d{1,4}$/.test(attempts) && Number(attempts) >= 1 && Number(attempts) <= 1000
            ? null
            : 'additional attempts must be a whole number from 1 to 1000',
          reason === '' ? 'a reason is required: why, and the ticket' : null,
        ].filter((p): p is string => p !== null)
      : [];
  if (step !== 'apply' || problems.length > 0) {
    const { total, keys } = await groupKeys(db, group, 10);
    return pageReply(
      problems.length > 0 ? 400 : 200,
      groupRedrivePreview(
        ctx,
        group,
        total,
        keys,
        problems.length > 0 ? `Not redriven: ${problems.join('; ')}.` : null,
      ),
    );
  }
  const { keys } = await groupKeys(db, group, BULK_LIMIT);
  let redriven = 0;
  let skipped = 0;
  const refused: [string, unknown][] = [];
  for (const k of keys) {
    const answer = await redriveAction(db, k.tenant, k.key, Number(attempts), reason);
    if (answer.ok) redriven += 1;
    else if (answer.error?.sqlstate === 'SE011' || answer.error?.sqlstate === 'SE010') skipped += 1;
    else refused.push([`${k.tenant} / ${k.key}`, `${answer.error?.sqlstate ?? ''} ${answer.error?.message ?? ''}`]);
  }
  return answerReply(
    refused.length === 0 ? 200 : 409,
    answerPage(
      ctx,
      'Redrive a group',
      {
        ok: refused.length === 0,
        summary: `redrove ${redriven} dead letter(s)${skipped === 0 ? '' : `, ${skipped} skipped (no longer dead letters)`}${refused.length === 0 ? '' : `, ${refused.length} refused`}`,
        fields: [
          ['error code', group.code ?? '(no error)'],
          ['tenant', group.tenant ?? 'every tenant this login sees'],
          ['additional attempts', attempts],
          ['reason', reason],
          ...refused.slice(0, 20),
        ],
        error: null,
      },
      '/dead-letters',
      'Dead letters',
    ),
  );
}
