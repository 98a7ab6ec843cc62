import { answerPage, confirmPage, refusalPage } from './action-pages.js';
import { expireLeasesAction, resolveAction } from './actions.js';
import type { ConsoleDatabase } from './database.js';
import { href, html, ident } from './escape.js';
import { answerReply, HttpProblem, jsonField, pageReply, type Reply } from './http.js';
import type { PageContext } from './layout.js';
import { readOverview } from './overview-data.js';
import { redriveGroupRoute, redriveRoute } from './redrive-route.js';
import { resetConsumerRoute } from './reset-consumer.js';

// The console's actions (POST, each with the session's CSRF token, checked by server.ts): a form
// step, a confirmation that says what will happen, then the API's answer.

export async function actionRoute(
  db: ConsoleDatabase,
  path: string,
  form: URLSearchParams,
  ctx: PageContext,
): Promise<Reply> {
  const step = form.get('step') ?? 'confirm';
  const tenant = form.get('tenant') ?? '';
  const key = form.get('key') ?? '';
  const opHref = href('/op', { tenant, key });
  const notGranted = (what: string) =>
    pageReply(403, refusalPage(ctx, 'Refused', `refused: this login (${ctx.caps.login}) may not ${what}`));
  switch (path) {
    case '/actions/resolve': {
      if (!ctx.caps.act.resolve) return notGranted('resolve (no EXECUTE on settle.resolve)');
      const outcome = form.get('outcome');
      const reason = form.get('reason')?.trim() ?? '';
      const fingerprint = form.get('fingerprint') ?? '';
      const expected = form.get('expected_attempt') ?? '';
      const payload = jsonField(form, 'payload', true);
      const evidence = jsonField(form, 'evidence', false);
      const problems = [
        outcome === 'completed' || outcome === 'failed' ? null : 'choose completed or failed',
        reason === '' ? 'a reason is required: why, and the ticket' : null,
        /^\d{1,9}$/.test(expected) ? null : 'the page did not say which attempt it showed (reload the operation)',
        payload.ok ? null : payload.problem,
        evidence.ok ? null : evidence.problem,
      ].filter((p): p is string => p !== null);
      if (problems.length > 0 || !payload.ok || !evidence.ok || (outcome !== 'completed' && outcome !== 'failed')) {
        return pageReply(
          400,
          answerPage(
            ctx,
            'Resolve',
            { ok: false, summary: `not sent: ${problems.join('; ')}`, fields: [], error: null },
            opHref,
            'Back to the operation',
          ),
        );
      }
      const values = {
        tenant,
        key,
        fingerprint,
        outcome,
        payload: payload.text ?? '',
        reason,
        evidence: evidence.text ?? '',
        expected_attempt: expected,
      };
      if (step !== 'apply') {
        const what = html`<p>Resolve <b class="mono">${ident(tenant)}</b> / <b class="mono">${ident(key)}</b>, looked at in attempt <b>${expected}</b>, as <b>${outcome}</b>${outcome === 'failed' ? ' (asserting that no attempt took effect)' : ''}.</p>
<p>${outcome === 'completed' ? 'result' : 'error'}:</p><pre>${payload.text ?? ''}</pre><p>reason: <b>${reason}</b></p><p>evidence:</p><pre>${evidence.text ?? '-'}</pre>
<p class="muted">Recorded in the audit trail with the login ${ctx.caps.login}. A page older than the operation's current attempt is refused.</p>`;
        return pageReply(
          200,
          confirmPage(ctx, 'Confirm resolution', '/actions/resolve', what, values, `Resolve as ${outcome}`, opHref),
        );
      }
      const answer = await resolveAction(db, {
        tenant,
        key,
        fingerprint,
        outcome,
        payload: payload.text ?? 'null',
        reason,
        evidence: evidence.text,
        expectedAttempt: Number(expected),
      });
      return answerReply(answer.ok ? 200 : 409, answerPage(ctx, 'Resolve', answer, opHref, 'Back to the operation'));
    }
    case '/actions/redrive':
      if (!ctx.caps.act.redrive) return notGranted('redrive (no EXECUTE on settle.redrive)');
      return redriveRoute(db, form, ctx, step);
    case '/actions/redrive-group':
      if (!ctx.caps.act.redrive) return notGranted('redrive (no EXECUTE on settle.redrive)');
      return redriveGroupRoute(db, form, ctx, step);
    case '/actions/expire-leases': {
      if (!ctx.caps.act.expireLeases) return notGranted('expire leases (no EXECUTE on settle.expire_leases)');
      if (step !== 'apply') {
        const overview = await readOverview(db, ctx.caps);
        const lapsed = overview.metrics === null ? 'the' : String(Number(overview.metrics.lapsed_leases ?? 0));
        return pageReply(
          200,
          confirmPage(
            ctx,
            'Confirm: expire leases',
            '/actions/expire-leases',
            html`<p>End ${lapsed} lapsed lease(s) now (settle.expire_leases): each operation goes to unknown, pending or a dead letter as its attempt budget says.</p>`,
            {},
            'Expire lapsed leases',
            '/',
          ),
        );
      }
      return answerReply(200, answerPage(ctx, 'Expire leases', await expireLeasesAction(db), '/', 'Overview'));
    }
    case '/actions/reset-consumer':
      if (!ctx.caps.act.resetConsumer) return notGranted('reset a consumer (no EXECUTE on settle.reset_consumer)');
      return resetConsumerRoute(db, form, ctx, step);
    default:
      throw new HttpProblem(404, 'no such action');
  }
}
