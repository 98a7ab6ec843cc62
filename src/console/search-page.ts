import { href, html, ident } from './escape.js';
import { page, when, type PageContext } from './layout.js';
import { COUNT_CAP, REASONS, STATUSES, type SearchPage, type SearchQuery } from './search-data.js';

function select(name: string, options: readonly string[], chosen: string | undefined): ReturnType<typeof html> {
  return html`<select name="${name}" id="${name}"><option value="">any</option>${options.map((o) => html`<option value="${o}"${o === chosen ? html` selected` : ''}>${o}</option>`)}</select>`;
}

export function searchPage(
  ctx: PageContext,
  query: SearchQuery & { readonly key?: string },
  result: SearchPage | null,
  problem: string | null,
): string {
  const filters = {
    tenant: query.tenant,
    status: query.status,
    reason: query.reason,
    code: query.code,
    older: query.olderThanMinutes,
  };
  return page(
    ctx,
    'Search',
    html`<h1>Search</h1>
<form method="get" action="/search" class="filters" id="search-form">
<div><label for="tenant">tenant (exact)</label><input type="text" name="tenant" id="tenant" value="${query.tenant ?? ''}"></div>
<div><label for="key">key (exact, with a tenant)</label><input type="text" name="key" id="key" value="${query.key ?? ''}"></div>
<div><label for="status">status</label>${select('status', STATUSES, query.status)}</div>
<div><label for="reason">dead-letter reason</label>${select('reason', REASONS, query.reason)}</div>
<div><label for="code">error code (with a reason)</label><input type="text" name="code" id="code" value="${query.code ?? ''}"></div>
<div><label for="older">last changed more than (minutes) ago</label><input type="number" min="0" name="older" id="older" value="${query.olderThanMinutes ?? ''}"></div>
<div><button type="submit">Search</button></div>
</form>
${problem === null ? '' : html`<p class="answer refused" id="problem">${problem}</p>`}
${
  result === null
    ? ''
    : result.rows.length === 0
      ? html`<p class="muted" id="no-results">No operation visible to this login matches.</p>`
      : html`<p id="total"><b>${result.total > COUNT_CAP ? `${COUNT_CAP.toLocaleString('en')}+` : result.total}</b> operation(s) match${query.cursor === undefined ? '' : ' (this page continues the list)'}.</p><table id="results"><tr><th>tenant</th><th>key</th><th>status</th><th>attempt</th><th>dead letter</th><th>last changed</th></tr>
${result.rows.map((r) => html`<tr><td class="mono">${ident(r.tenant)}</td><td><a class="mono" href="${href('/op', { tenant: r.tenant, key: r.key })}">${ident(r.key)}</a></td><td>${r.status}</td><td>${r.attempt}/${r.max_attempts}</td><td>${r.dead_letter_reason ?? ''}</td><td>${when(r.updated_at)}</td></tr>`)}
</table>
${result.next === null ? html`<p class="muted">End of the list.</p>` : html`<p><a id="next-page" href="${href('/search', { ...filters, cursor: result.next })}">Next ${result.rows.length} →</a></p>`}`
}`,
  );
}
