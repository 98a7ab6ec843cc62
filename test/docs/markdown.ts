// Small parsers for the reference docs (docs/sql-api.md, docs/errors.md), shared by the tests
// that keep those docs in step with the database.

/** Lines that state a function signature: `settle.<name>(<arguments>) RETURNS <result>`. */
export interface SignatureLine {
  readonly name: string;
  readonly line: string;
}

const SIGNATURE = /^settle\.([a-z_][a-z0-9_]*)\(.*\) RETURNS \S.*$/;

export function signatureLines(markdown: string): SignatureLine[] {
  return markdown
    .split('\n')
    .map((line) => ({ line, match: SIGNATURE.exec(line) }))
    .filter((entry): entry is { line: string; match: RegExpExecArray } => entry.match !== null)
    .map(({ line, match }) => ({ name: match[1] ?? '', line }));
}

/** Rows `| SE001 | invalid_tenant | ...` of the error registry: code and name. */
export function errorRegistry(markdown: string): { code: string; name: string }[] {
  const rows: { code: string; name: string }[] = [];
  for (const line of markdown.split('\n')) {
    const match = /^\| (SE[0-9A-Z]{3}) \| ([^|]*?) \|/.exec(line);
    if (match) rows.push({ code: match[1] ?? '', name: match[2] ?? '' });
  }
  return rows;
}

/**
 * The first-column names (`` `column` ``) of the table under the heading that contains
 * `heading`, up to the next heading. Undefined when there is no such heading.
 */
export function tableColumnsUnder(markdown: string, heading: string): string[] | undefined {
  const lines = markdown.split('\n');
  const start = lines.findIndex((line) => /^#{2,4} /.test(line) && line.includes(heading));
  if (start < 0) return undefined;
  const names: string[] = [];
  for (const line of lines.slice(start + 1)) {
    if (/^#{1,4} /.test(line)) break;
    const match = /^\| `([a-z_][a-z0-9_]*)` \|/.exec(line);
    if (match) names.push(match[1] ?? '');
  }
  return names;
}

/** Every distinct SE code mentioned anywhere in a text, sorted. */
export function seCodesIn(text: string): string[] {
  return [...new Set(text.match(/\bSE\d{3}\b/g) ?? [])].sort();
}

/** A fenced code block: its info string (`sql`, `sh`, ...), its text and its 1-based opening line. */
export interface FencedBlock {
  readonly lang: string;
  readonly body: string;
  readonly line: number;
}

/** Every fenced (```) block of a Markdown text, in order. */
export function fencedBlocks(markdown: string): FencedBlock[] {
  const blocks: FencedBlock[] = [];
  let open: { lang: string; line: number; lines: string[] } | undefined;
  markdown.split('\n').forEach((text, index) => {
    const fence = /^\s*```(\S*)\s*$/.exec(text);
    if (open === undefined) {
      if (fence) open = { lang: fence[1] ?? '', line: index + 1, lines: [] };
    } else if (fence && fence[1] === '') {
      blocks.push({ lang: open.lang, body: open.lines.join('\n'), line: open.line });
      open = undefined;
    } else {
      open.lines.push(text);
    }
  });
  return blocks;
}

/** The inline code spans (`like this`) outside fenced blocks. */
export function inlineCodeSpans(markdown: string): string[] {
  const prose = markdown.replace(/^\s*```[^\n]*\n[\s\S]*?^\s*```\s*$/gm, '');
  return [...prose.matchAll(/`([^`\n]+)`/g)].map((match) => match[1] ?? '');
}
