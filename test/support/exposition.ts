// The Prometheus text exposition format (version 0.0.4), read as a scraper reads it: what
// @opentelemetry/exporter-prometheus serves on /metrics.

export interface Sample {
  readonly name: string;
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

export interface Exposition {
  /** `# TYPE` of each metric family. */
  readonly types: ReadonlyMap<string, string>;
  readonly samples: readonly Sample[];
}

const unescape = (value: string): string => value.replace(/\\(["\\n])/g, (_, c: string) => (c === 'n' ? '\n' : c));

/** Parses a /metrics body; throws on a line that is neither a comment nor a sample. */
export function parseExposition(text: string): Exposition {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type !== null) types.set(type[1] ?? '', type[2] ?? '');
    if (line === '' || line.startsWith('#')) continue;
    const sample = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: \d+)?$/.exec(line);
    if (sample === null) throw new Error(`not an exposition line: ${line}`);
    const labels: Record<string, string> = {};
    for (const [, k, v] of (sample[2] ?? '').matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[k ?? ''] = unescape(v ?? '');
    samples.push({ name: sample[1] ?? '', labels, value: Number(sample[3]) });
  }
  return { types, samples };
}

/** GET the endpoint and parse it. */
export async function scrapeExposition(url: string): Promise<{ contentType: string; exposition: Exposition }> {
  const response = await fetch(url);
  if (response.status !== 200) throw new Error(`GET ${url} answered ${response.status}`);
  return {
    contentType: response.headers.get('content-type') ?? '',
    exposition: parseExposition(await response.text()),
  };
}
