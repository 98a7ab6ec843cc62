import { describe, expect, it } from 'vitest';
import { escapeHtml, href, html, Html, ident } from '../../src/console/escape.js';
import { cookieName, SessionStore, readCookie } from '../../src/console/session.js';

describe("escapeHtml, the console's one escaping function", () => {
  it('escapes the five characters that end text or an attribute', () => {
    expect(escapeHtml(`<img src=x onerror="alert('1')">&`)).toBe(
      '&lt;img src=x onerror=&quot;alert(&#39;1&#39;)&quot;&gt;&amp;',
    );
    expect(escapeHtml('</script><script>alert(1)</script>')).toBe(
      '&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;',
    );
    expect(escapeHtml('plain text, ünïcode ✓')).toBe('plain text, ünïcode ✓');
    expect(escapeHtml(null)).toBe('');
    expect(escapeHtml(undefined)).toBe('');
    expect(escapeHtml(42)).toBe('42');
    expect(escapeHtml(10n)).toBe('10');
  });

  it('is what html`` applies to every interpolation, arrays included; Html it built itself is kept', () => {
    const key = '"><svg onload=alert(1)>';
    expect(html`<a title="${key}">${key}</a>`.text).toBe(
      '<a title="&quot;&gt;&lt;svg onload=alert(1)&gt;">&quot;&gt;&lt;svg onload=alert(1)&gt;</a>',
    );
    expect(html`<ul>${['<b>', 'x'].map((s) => html`<li>${s}</li>`)}</ul>`.text).toBe(
      '<ul><li>&lt;b&gt;</li><li>x</li></ul>',
    );
    expect(html`${new Html('<i>ok</i>')}${false}${null}`.text).toBe('<i>ok</i>');
  });

  it('ident marks every character outside printable ASCII by its code point, invisible ones as the code point', () => {
    expect(ident('acme').text).toBe('acme');
    expect(ident('\u0430cme').text).toBe('<mark class="nonascii" title="U+0430">\u0430</mark>cme');
    expect(ident('a\u200bb').text).toBe('a<mark class="nonascii" title="U+200B">U+200B</mark>b');
    expect(ident('<b>').text).toBe('&lt;b&gt;');
    expect(ident('\u{1F600}').text).toBe('<mark class="nonascii" title="U+1F600">\u{1F600}</mark>');
  });

  it('href percent-encodes values, so a javascript: key stays a query value of a console path', () => {
    expect(href('/op', { tenant: 't', key: 'javascript:alert(1)' })).toBe('/op?tenant=t&key=javascript%3Aalert%281%29');
    expect(href('/search', { tenant: undefined, status: '' })).toBe('/search');
  });
});

describe('sessions', () => {
  it('the access token works once; sessions end when idle and at their lifetime', () => {
    let now = 0;
    const store = new SessionStore({ token: 'a-token-of-sixteen+', idleMs: 1000, lifetimeMs: 5000, now: () => now });
    expect(store.exchange('wrong')).toBeUndefined();
    const session = store.exchange('a-token-of-sixteen+');
    expect(session).toBeDefined();
    expect(store.exchange('a-token-of-sixteen+')).toBeUndefined();
    now = 900;
    expect(store.find(session?.id)).toBe(session);
    now = 1800;
    expect(store.find(session?.id)).toBe(session); // used 900 ms ago
    now = 2900;
    expect(store.find(session?.id)).toBeUndefined(); // idle 1,100 ms
    const reusable = new SessionStore({
      token: 'a-token-of-sixteen+',
      reusableToken: true,
      idleMs: 10_000,
      lifetimeMs: 5000,
      now: () => now,
    });
    const first = reusable.exchange('a-token-of-sixteen+');
    expect(reusable.exchange('a-token-of-sixteen+')).toBeDefined();
    now += 4000;
    expect(reusable.find(first?.id)).toBe(first);
    now += 1500;
    expect(reusable.find(first?.id)).toBeUndefined(); // past its lifetime, however recently used
  });

  it('an issued token works once, until it expires; the first token stays until used', () => {
    let now = 0;
    const store = new SessionStore({ token: 'a-token-of-sixteen+', issuedTokenMs: 1000, now: () => now });
    const issued = store.issueToken();
    const later = store.issueToken();
    expect(issued).not.toBe(later);
    expect(store.exchange(issued)).toBeDefined();
    expect(store.exchange(issued)).toBeUndefined();
    now = 1001;
    expect(store.exchange(later)).toBeUndefined();
    expect(store.exchange('a-token-of-sixteen+')).toBeDefined();
  });

  it('the cookie is named per console (its port)', () => {
    expect(cookieName(7070)).toBe('pg_settle_console_7070');
    expect(cookieName(7071)).not.toBe(cookieName(7070));
  });

  it('readCookie finds one cookie among several', () => {
    expect(readCookie('a=1; pg_settle_console=abc; b=2', 'pg_settle_console')).toBe('abc');
    expect(readCookie('pg_settle_consolex=1', 'pg_settle_console')).toBeUndefined();
    expect(readCookie(undefined, 'x')).toBeUndefined();
  });
});
