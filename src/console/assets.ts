// The console's only stylesheet and script, served from its own origin (the Content-Security-
// Policy allows 'self' and nothing inline). The script is progressive enhancement: without it
// every page works (a Refresh link reads it again); with it, the feed lag refreshes every 5 s, a
// page reloads itself (the overview every 30 s by default, any page when its box is ticked)
// while no form is in use, and ids and the page's address get Copy buttons. It writes with
// textContent only.

export const STYLESHEET = `
:root { --fg: #1d2430; --muted: #5b6575; --line: #d6dbe3; --bg: #fff; --panel: #f6f8fa; --ok: #1a7f37; --warn: #9a6700; --bad: #cf222e; --info: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1.5em; align-items: center; padding: .6em 1.2em; background: #24292f; color: #fff; }
header a { color: #fff; text-decoration: none; font-weight: 600; white-space: nowrap; }
header .who { margin-left: auto; font-size: 12px; opacity: .9; }
header form { margin: 0; }
main { padding: 1em 1.2em 3em; max-width: 1200px; }
h1 { font-size: 20px; margin: .2em 0 .6em; }
h2 { font-size: 16px; margin: 1.4em 0 .5em; border-bottom: 1px solid var(--line); padding-bottom: .2em; }
table { border-collapse: collapse; width: 100%; margin: .3em 0 1em; }
th, td { text-align: left; padding: .3em .5em; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: var(--panel); font-weight: 600; font-size: 12px; color: var(--muted); }
caption { text-align: left; color: var(--muted); font-size: 12px; padding: .2em 0; }
tr.holds td { background: #fff8c5; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { margin: 0; white-space: pre-wrap; word-break: break-all; font: 12px/1.4 ui-monospace, monospace; max-height: 16em; overflow: auto; }
code, .mono { font: 12px ui-monospace, monospace; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.page-tools { float: right; margin: 0; font-size: 12px; color: var(--muted); }
.page-tools button, button.copy { font-size: 11px; padding: .05em .5em; margin-left: .3em; }
label.inline-label { display: inline; font-weight: normal; margin: 0; }
details.json-large summary { cursor: pointer; color: var(--muted); }
mark.nonascii { background: #ffebe9; color: var(--bad); outline: 1px dotted var(--bad); padding: 0 1px; }
.badge { display: inline-block; padding: 0 .5em; border-radius: 1em; font-size: 12px; border: 1px solid var(--line); background: var(--panel); }
.badge.firing, .badge.bad { background: #ffebe9; border-color: var(--bad); color: var(--bad); }
.badge.ok { background: #dafbe1; border-color: var(--ok); color: var(--ok); }
.badge.warn { background: #fff8c5; border-color: var(--warn); color: var(--warn); }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: .6em; }
.tile { background: var(--panel); border: 1px solid var(--line); border-radius: 6px; padding: .5em .7em; }
.tile .n { font-size: 22px; font-weight: 600; }
a.tile { color: inherit; text-decoration: none; }
a.tile:hover { border-color: var(--info); }
.lattice { display: flex; gap: .3em; list-style: none; padding: 0; margin: .3em 0 1em; }
.lattice li { padding: .2em .7em; border: 1px solid var(--line); border-radius: 4px; color: var(--muted); }
.lattice li.passed { background: var(--panel); }
.lattice li.current { background: #24292f; color: #fff; border-color: #24292f; font-weight: 600; }
form.inline { display: inline; }
fieldset { border: 1px solid var(--line); border-radius: 6px; margin: .6em 0; padding: .6em .9em; }
label { display: block; margin: .4em 0 .15em; font-weight: 600; font-size: 12px; }
input[type=text], input[type=number], select, textarea { font: 13px ui-monospace, monospace; padding: .3em; border: 1px solid var(--line); border-radius: 4px; }
textarea { width: 100%; min-height: 4em; }
button { font: inherit; padding: .35em .9em; border-radius: 4px; border: 1px solid #1f883d; background: #1f883d; color: #fff; cursor: pointer; }
button.secondary { background: var(--panel); color: var(--fg); border-color: var(--line); }
button.danger { background: var(--bad); border-color: var(--bad); }
.answer { border-left: 4px solid var(--ok); background: #f0fff4; padding: .6em .9em; margin: 1em 0; }
.answer.refused { border-color: var(--bad); background: #fff5f5; }
.confirm { border-left: 4px solid var(--warn); background: #fffbea; padding: .6em .9em; margin: 1em 0; }
.filters { display: flex; flex-wrap: wrap; gap: .8em; align-items: end; }
.filters label { margin: 0 0 .15em; }
svg text { font: 11px system-ui, sans-serif; fill: var(--fg); }
svg .tick { fill: var(--muted); }
svg .axis { stroke: var(--line); }
svg .bar.completed, svg .span.settled, svg .observation.completed { fill: #2da44e; }
svg .bar.failed, svg .observation.failed { fill: #8c959f; }
svg .bar.unknown, svg .observation.unknown { fill: #d4a72c; }
svg .bar.conflict, svg .observation.conflict { fill: #cf222e; }
svg .span { fill: #9ec5fe; }
svg .span.leased { fill: #0969da; }
svg .span.lapsed { fill: #ffb3b8; }
svg .span.superseded, svg .span.expired, svg .span.lease_expired { fill: #c8ccd1; }
svg .span.fenced, svg .span.settled_elsewhere { fill: #e6c3f0; }
svg .observation { stroke: #fff; stroke-width: 1.5; }
svg .heartbeat { stroke: #0550ae; stroke-width: 2; }
svg .late { fill: #bf3989; }
svg .fenced { stroke: var(--bad); stroke-width: 2.5; fill: none; }
`;

export const SCRIPT = `'use strict';
(function () {
  var body = document.body;
  // Cells are found by comparing attribute values, never by a selector built from a name: a
  // consumer may be called anything, quotes and brackets included.
  function set(name, text, consumer, lane) {
    var nodes = document.querySelectorAll('[data-live]');
    for (var i = 0; i < nodes.length; i += 1) {
      var n = nodes[i];
      if (n.getAttribute('data-live') !== name) continue;
      if (consumer !== undefined && (n.getAttribute('data-consumer') !== consumer || n.getAttribute('data-lane') !== lane)) continue;
      n.textContent = text;
    }
  }
  function poll() {
    fetch('/live.json', { credentials: 'same-origin', headers: { accept: 'application/json' } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (data) {
        if (data === null) return;
        (data.lanes || []).forEach(function (l) {
          set('lag-events', String(l.lagEvents), String(l.consumer), String(l.lane));
          set('lag-seconds', Number(l.lagSeconds).toFixed(1), String(l.consumer), String(l.lane));
        });
        if (data.horizon) set('horizon', data.horizon);
        set('updated', new Date().toISOString().slice(11, 19) + ' UTC');
      })
      .catch(function () {});
  }
  if (document.querySelector('[data-live]') !== null) setInterval(poll, 5000);

  // Copying: a button after each element with data-copy (its value), and one for the page's address.
  function copy(text, button) {
    function done() { button.textContent = 'Copied'; setTimeout(function () { button.textContent = button.getAttribute('data-label'); }, 1500); }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(done, function () {});
      return;
    }
    var area = document.createElement('textarea');
    area.value = text;
    document.body.appendChild(area);
    area.select();
    try { document.execCommand('copy'); done(); } catch (e) {}
    area.remove();
  }
  function copyButton(label, name, text) {
    var b = document.createElement('button');
    b.type = 'button';
    b.className = 'secondary copy';
    b.textContent = label;
    b.setAttribute('data-label', label);
    b.setAttribute('aria-label', label + ' ' + name);
    b.addEventListener('click', function () { copy(typeof text === 'function' ? text() : text, b); });
    return b;
  }
  var copies = document.querySelectorAll('[data-copy]');
  for (var c = 0; c < copies.length; c += 1) {
    var node = copies[c];
    node.after(copyButton('Copy', node.getAttribute('data-copy-name') || 'value', node.getAttribute('data-copy')));
  }
  var tools = document.getElementById('page-tools');
  if (tools !== null) {
    tools.append(' · ');
    tools.append(copyButton('Copy link', 'to this page', function () { return location.href; }));

    // Refresh: on by default where the page asks for it (data-refresh), remembered per page for
    // the tab; a reload waits while a field has the focus or a form has been typed into.
    var every = Number(body.getAttribute('data-refresh')) || 30;
    var stored = sessionStorage.getItem('refresh:' + location.pathname);
    var on = stored === null ? body.getAttribute('data-refresh') !== null : stored === 'on';
    var label = document.createElement('label');
    label.className = 'inline-label';
    var box = document.createElement('input');
    box.type = 'checkbox';
    box.id = 'auto-refresh';
    box.checked = on;
    label.append(box, ' every ' + every + ' s');
    tools.append(' · ', label);
    box.addEventListener('change', function () {
      sessionStorage.setItem('refresh:' + location.pathname, box.checked ? 'on' : 'off');
    });
    var typed = false;
    document.addEventListener('input', function (e) { if (e.target !== box) typed = true; });
    setInterval(function () {
      if (!box.checked || typed) return;
      var active = document.activeElement;
      if (active && active !== box && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) return;
      location.reload();
    }, every * 1000);
  }
})();
`;
