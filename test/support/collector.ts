// deploy/sql_exporter/pg-settle.collector.yml, read as sql_exporter reads it: its metrics (name,
// type, value and key-label columns, query) and its queries.

export interface ExportedMetric {
  name: string;
  type: string;
  values: string[];
  keyLabels: string[];
  queryRef: string;
}

/** The two lists of the collector file (metrics, queries), read line by line: the file keeps to this shape. */
export function parseCollector(text: string): { metrics: ExportedMetric[]; queries: Map<string, string> } {
  const list = (line: string): string[] =>
    (/\[(.*)\]/.exec(line)?.[1] ?? '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
  const metrics: ExportedMetric[] = [];
  const queries = new Map<string, string>();
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i += 1) {
    const line = lines[i] ?? '';
    const metric = /^ {2}- metric_name: (\S+)$/.exec(line);
    if (metric !== null) metrics.push({ name: metric[1] ?? '', type: '', values: [], keyLabels: [], queryRef: '' });
    const current = metrics.at(-1);
    if (current !== undefined && /^ {4}type: /.test(line)) current.type = line.split(':')[1]?.trim() ?? '';
    if (current !== undefined && /^ {4}values: /.test(line)) current.values = list(line);
    if (current !== undefined && /^ {4}key_labels: /.test(line)) current.keyLabels = list(line);
    if (current !== undefined && /^ {4}query_ref: /.test(line)) current.queryRef = line.split(':')[1]?.trim() ?? '';
    const query = /^ {2}- query_name: (\S+)$/.exec(line);
    if (query !== null && /^ {4}query: \|$/.test(lines[i + 1] ?? '')) {
      const body: string[] = [];
      for (let j = i + 2; j < lines.length && (lines[j] ?? '').startsWith('      '); j += 1)
        body.push((lines[j] ?? '').slice(6));
      queries.set(query[1] ?? '', body.join('\n'));
    }
  }
  return { metrics, queries };
}
