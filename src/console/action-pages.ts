import type { ActionAnswer } from './actions.js';
import type { ApiError } from './database.js';
import { html, type Html } from './escape.js';
import { jsonBlock } from './json-block.js';
import { csrfField, page, type PageContext } from './layout.js';

/** A confirmation: what will happen, the values carried in hidden fields, and one button. */
export function confirmPage(
  ctx: PageContext,
  title: string,
  action: string,
  what: Html,
  values: Readonly<Record<string, string>>,
  button: string,
  back: string,
  /** Fields the operator fills in to confirm (a required acknowledgement, a reason). */
  fields: Html = html``,
): string {
  return page(
    ctx,
    title,
    html`<h1>${title}</h1>
<div class="confirm" id="confirm">${what}</div>
<form method="post" action="${action}" id="confirm-form">${csrfField(ctx)}<input type="hidden" name="step" value="apply">
${Object.entries(values).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}
${fields}<button type="submit" class="danger">${button}</button> <a href="${back}">Cancel</a></form>`,
  );
}

export function errorBlock(error: ApiError): Html {
  return html`<table class="error"><tr><th>SQLSTATE</th><td class="mono" id="sqlstate">${error.sqlstate ?? '-'}</td></tr>
<tr><th>message</th><td id="error-message">${error.message}</td></tr>
${error.detail === null ? '' : html`<tr><th>detail</th><td class="mono">${error.detail}</td></tr>`}
${error.hint === null ? '' : html`<tr><th>hint</th><td>${error.hint}</td></tr>`}</table>`;
}

/** The API's answer to an action, with a way back. */
export function answerPage(
  ctx: PageContext,
  title: string,
  answer: ActionAnswer,
  back: string,
  backLabel: string,
): string {
  return page(
    ctx,
    title,
    html`<h1>${title}</h1>
<div class="answer${answer.ok ? '' : ' refused'}" id="answer"><p id="answer-summary"><b>${answer.summary}</b></p>
${answer.error === null ? '' : errorBlock(answer.error)}
${answer.fields.length === 0 ? '' : html`<table>${answer.fields.map(([name, value]) => html`<tr><th>${name}</th><td>${typeof value === 'object' && value !== null ? jsonBlock(value) : value === null || value === undefined ? '-' : String(value)}</td></tr>`)}</table>`}
</div>
<p><a href="${back}" id="back">${backLabel}</a></p>`,
  );
}

/** A refusal the console makes before any call (a bad form, a missing grant, a missing CSRF token). */
export function refusalPage(ctx: PageContext | null, title: string, message: string): string {
  return page(
    ctx,
    title,
    html`<h1>${title}</h1><div class="answer refused" id="answer"><p id="answer-summary"><b>${message}</b></p></div><p><a href="/">Overview</a></p>`,
  );
}
