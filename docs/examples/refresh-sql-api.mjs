// Refreshes the psql examples of docs/sql-api.md from a transcript of
// docs/examples/sql-api-walkthrough.sql (see the header of that file for the commands).
// Usage: node docs/examples/refresh-sql-api.mjs <transcript> [docs/sql-api.md]
// Each `@@ <name>` block of the transcript replaces the code block between
// `<!-- example: <name> -->` and `<!-- /example -->` in the document.
import { readFileSync, writeFileSync } from 'node:fs';

const [transcriptPath, docPath = 'docs/sql-api.md'] = process.argv.slice(2);
if (transcriptPath === undefined) {
  console.error('usage: node docs/examples/refresh-sql-api.mjs <transcript> [docs/sql-api.md]');
  process.exit(2);
}

const blocks = new Map();
let current;
for (const raw of readFileSync(transcriptPath, 'utf8').split('\n')) {
  const start = /^@@ (\S+)$/.exec(raw);
  if (start) {
    current = [];
    blocks.set(start[1], current);
  } else if (current !== undefined && !raw.startsWith("\\echo '@@ ")) {
    current.push(raw.replace(/^psql:[^:]+:\d+: /, '').trimEnd());
  }
}

const used = new Set();
const doc = readFileSync(docPath, 'utf8').replace(
  /<!-- example: (\S+) -->\n[\s\S]*?<!-- \/example -->/g,
  (_whole, name) => {
    const lines = blocks.get(name);
    if (lines === undefined) throw new Error(`no block "@@ ${name}" in ${transcriptPath}`);
    used.add(name);
    while (lines.length > 0 && lines.at(-1) === '') lines.pop();
    return `<!-- example: ${name} -->\n\`\`\`sql\n${lines.join('\n')}\n\`\`\`\n<!-- /example -->`;
  },
);
writeFileSync(docPath, doc);
const unused = [...blocks.keys()].filter((name) => !used.has(name) && name !== 'end');
console.log(`refreshed ${used.size} examples${unused.length > 0 ? `; not in the document: ${unused.join(', ')}` : ''}`);
