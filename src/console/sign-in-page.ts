import { html } from './escape.js';
import { page } from './layout.js';

// The way in: the page any request without a live session gets. A sign-in address works once;
// the running console prints a new one when Enter is pressed in its terminal, so signing out, an
// idle session or a second browser never needs a restart.

export type SignInReason = 'none' | 'elsewhere' | 'ended' | 'signed-out' | 'invalid';

const SAY: Readonly<Record<SignInReason, string>> = {
  none: 'This browser has no session with this console.',
  elsewhere: 'A link from another site arrives without the console’s session cookie (SameSite=Strict).',
  ended: 'The session ended (30 minutes without a request, or 8 hours after it began), or the console restarted.',
  'signed-out': 'Signed out.',
  invalid:
    'That sign-in address or token is not valid: each works once (and a new one for 15 minutes), and only with the console that printed it.',
};

export function signInPage(reason: SignInReason, next: string): string {
  return page(
    null,
    'Sign in',
    html`<h1>Sign in</h1>
<p id="sign-in-reason"${reason === 'invalid' ? html` class="answer refused"` : ''}>${SAY[reason]}</p>
${reason === 'elsewhere' ? html`<p><a id="continue" href="${next}">Open <span class="mono">${next}</span></a> (with this browser’s session, if it has one).</p>` : ''}
<p id="sign-in-how">For a new sign-in address, press <kbd>Enter</kbd> in the terminal where <code>pg-settle console</code> runs: it prints one (it works once, for 15 minutes). Open it, or paste it here. With <code>PG_SETTLE_CONSOLE_TOKEN</code> set, that token works again.</p>
<form method="post" action="/sign-in" id="sign-in-form"><input type="hidden" name="next" value="${next}">
<label for="sign-in-token">sign-in address or token</label><input type="password" name="token" id="sign-in-token" size="60" autocomplete="off" required>
<p><button type="submit">Sign in</button></p></form>
${next === '/' ? '' : html`<p class="muted">Then on to <span class="mono" id="sign-in-next">${next}</span>.</p>`}`,
  );
}
