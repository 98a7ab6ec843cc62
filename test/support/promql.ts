// PromQL as Prometheus reads it, for the queries of deploy/grafana and deploy/prometheus: parsed by
// Prometheus' own grammar (@prometheus-io/lezer-promql, the parser of Prometheus' web UI), and
// evaluated over two scrapes for the subset those queries use. A range selector ([5m]) reads the
// two scrapes as its two samples (the window is taken to cover both), as rate() over a scrape
// interval does; anything outside the subset throws, so a query that uses more fails loudly here.
import { parser } from '@prometheus-io/lezer-promql';

type SyntaxNode = ReturnType<typeof parser.parse>['topNode'];

/** One series at one scrape: its labels, `__name__` among them. */
export interface Series {
  readonly labels: Readonly<Record<string, string>>;
  readonly value: number;
}

/** Every target's series at one moment (seconds on any clock). */
export interface Snapshot {
  readonly at: number;
  readonly series: readonly Series[];
}

export interface Matcher {
  readonly label: string;
  readonly op: '=' | '!=' | '=~' | '!~';
  readonly value: string;
}

/** A vector selector: the metric it names (if any) and its label matchers (`__name__` among them). */
export interface Selector {
  readonly text: string;
  readonly metric: string | undefined;
  readonly matchers: readonly Matcher[];
}

/** The labels of a `by (...)` / `without (...)` and the selectors under that aggregation. */
export interface Grouping {
  readonly labels: readonly string[];
  readonly selectors: readonly Selector[];
}

interface Parsed {
  readonly expr: string;
  readonly root: SyntaxNode;
}

/** The syntax errors of `expr` (empty when Prometheus' grammar accepts it). */
export function syntaxErrors(expr: string): string[] {
  const errors: string[] = [];
  parser.parse(expr).iterate({
    enter(node) {
      if (node.type.isError)
        errors.push(
          `syntax error at ${node.from}: ${JSON.stringify(expr.slice(Math.max(0, node.from - 20), node.to + 20))}`,
        );
    },
  });
  return errors;
}

function parse(expr: string): Parsed {
  const errors = syntaxErrors(expr);
  if (errors.length > 0) throw new Error(`${expr}: ${errors.join('; ')}`);
  return { expr, root: parser.parse(expr).topNode };
}

const text = (p: Parsed, node: SyntaxNode): string => p.expr.slice(node.from, node.to);
const children = (node: SyntaxNode): SyntaxNode[] => {
  const out: SyntaxNode[] = [];
  for (let child = node.firstChild; child !== null; child = child.nextSibling) out.push(child);
  return out;
};
const child = (node: SyntaxNode, name: string): SyntaxNode | undefined => children(node).find((c) => c.name === name);
const stringValue = (raw: string): string => JSON.parse(raw.startsWith("'") ? `"${raw.slice(1, -1)}"` : raw) as string;

function selectorOf(p: Parsed, node: SyntaxNode): Selector {
  const metric = child(node, 'Identifier');
  const matchers: Matcher[] = [];
  for (const m of children(child(node, 'LabelMatchers') ?? node).filter((c) => c.name.endsWith('LabelMatcher'))) {
    const label = child(m, 'LabelName');
    const op = child(m, 'MatchOp');
    const value = child(m, 'StringLiteral');
    if (label === undefined || op === undefined || value === undefined) throw new Error(`matcher ${text(p, m)}`);
    matchers.push({ label: text(p, label), op: text(p, op) as Matcher['op'], value: stringValue(text(p, value)) });
  }
  return { text: text(p, node), metric: metric === undefined ? undefined : text(p, metric), matchers };
}

/** The nodes named `name` in the tree under `node` (itself included), in order. */
function collect(node: SyntaxNode, name: string): SyntaxNode[] {
  const out: SyntaxNode[] = [];
  const walk = (n: SyntaxNode): void => {
    if (n.name === name) out.push(n);
    for (const c of children(n)) walk(c);
  };
  walk(node);
  return out;
}

/** Every vector selector of `expr` (those inside range selectors included). */
export function selectorsOf(expr: string): Selector[] {
  const p = parse(expr);
  return collect(p.root, 'VectorSelector').map((n) => selectorOf(p, n));
}

/** Every `by (...)` / `without (...)` of `expr`, with the selectors it aggregates. */
export function groupingsOf(expr: string): Grouping[] {
  const p = parse(expr);
  return collect(p.root, 'AggregateExpr').flatMap((aggregate) => {
    const modifier = child(aggregate, 'AggregateModifier');
    if (modifier === undefined) return [];
    const labels = collect(child(modifier, 'GroupingLabels') ?? modifier, 'LabelName').map((n) => text(p, n));
    const body = child(aggregate, 'FunctionCallBody');
    const selectors = body === undefined ? [] : collect(body, 'VectorSelector').map((n) => selectorOf(p, n));
    return [{ labels, selectors }];
  });
}

type Value =
  | { readonly kind: 'scalar'; readonly value: number }
  | { readonly kind: 'string'; readonly value: string }
  | { readonly kind: 'vector'; readonly series: readonly Series[] }
  | {
      readonly kind: 'range';
      readonly series: readonly { readonly labels: Readonly<Record<string, string>>; readonly values: number[] }[];
    };

const matches = (labels: Readonly<Record<string, string>>, m: Matcher): boolean => {
  const value = labels[m.label] ?? '';
  switch (m.op) {
    case '=':
      return value === m.value;
    case '!=':
      return value !== m.value;
    case '=~':
      return new RegExp(`^(?:${m.value})$`).test(value);
    case '!~':
      return !new RegExp(`^(?:${m.value})$`).test(value);
  }
};

/** The series of `snapshot` that `selector` selects. */
export function select(selector: Selector, snapshot: Snapshot): Series[] {
  const all = selector.metric === undefined ? [] : [{ label: '__name__', op: '=' as const, value: selector.metric }];
  return snapshot.series.filter((s) => [...all, ...selector.matchers].every((m) => matches(s.labels, m)));
}

const identity = (labels: Readonly<Record<string, string>>): string =>
  JSON.stringify(Object.entries(labels).sort(([a], [b]) => a.localeCompare(b)));

const withoutName = (labels: Readonly<Record<string, string>>): Record<string, string> => {
  const { __name__: _, ...rest } = labels;
  return rest;
};

/** Range functions over the two samples [before, after] of a series, dt seconds apart. */
const RANGE_FUNCTIONS: Readonly<Record<string, (values: number[], dt: number) => number>> = {
  rate: ([a = 0, b = 0], dt) => (b >= a ? b - a : b) / dt,
  increase: ([a = 0, b = 0]) => (b >= a ? b - a : b),
  delta: ([a = 0, b = 0]) => b - a,
  deriv: ([a = 0, b = 0], dt) => (b - a) / dt,
  min_over_time: (values) => Math.min(...values),
  max_over_time: (values) => Math.max(...values),
  avg_over_time: (values) => values.reduce((x, y) => x + y, 0) / values.length,
};

const AGGREGATIONS: Readonly<Record<string, (values: number[]) => number>> = {
  sum: (values) => values.reduce((a, b) => a + b, 0),
  min: (values) => Math.min(...values),
  max: (values) => Math.max(...values),
  avg: (values) => values.reduce((a, b) => a + b, 0) / values.length,
  count: (values) => values.length,
};

const COMPARISONS: Readonly<Record<string, (a: number, b: number) => boolean>> = {
  Gtr: (a, b) => a > b,
  Gte: (a, b) => a >= b,
  Lss: (a, b) => a < b,
  Lte: (a, b) => a <= b,
  EqlEql: (a, b) => a === b,
  Neq: (a, b) => a !== b,
};
const ARITHMETIC: Readonly<Record<string, (a: number, b: number) => number>> = {
  Add: (a, b) => a + b,
  Sub: (a, b) => a - b,
  Mul: (a, b) => a * b,
  Div: (a, b) => a / b,
};

/** Prometheus' histogram_quantile over one histogram's cumulative buckets. */
function bucketQuantile(q: number, buckets: { le: number; count: number }[]): number {
  buckets.sort((a, b) => a.le - b.le);
  const total = buckets.at(-1);
  if (total === undefined || total.le !== Number.POSITIVE_INFINITY || total.count === 0) return Number.NaN;
  if (q < 0) return Number.NEGATIVE_INFINITY;
  if (q > 1) return Number.POSITIVE_INFINITY;
  const rank = q * total.count;
  const b = buckets.findIndex((bucket) => bucket.count >= rank);
  if (b === buckets.length - 1) return buckets.at(-2)?.le ?? Number.NaN;
  const bucket = buckets[b] as { le: number; count: number };
  const previous = b === 0 ? { le: 0, count: 0 } : (buckets[b - 1] as { le: number; count: number });
  if (b === 0 && bucket.le <= 0) return bucket.le;
  return previous.le + (bucket.le - previous.le) * ((rank - previous.count) / (bucket.count - previous.count));
}

/** Evaluates `expr` at `after`, its range selectors reading [before, after]. */
export function evaluate(expr: string, before: Snapshot, after: Snapshot): Series[] {
  const p = parse(expr);
  const dt = after.at - before.at;
  if (!(dt > 0)) throw new Error('the second snapshot must come after the first');

  const vector = (v: Value, where: SyntaxNode): readonly Series[] => {
    if (v.kind !== 'vector') throw new Error(`${text(p, where)}: expected an instant vector, got a ${v.kind}`);
    return v.series;
  };
  const scalar = (v: Value, where: SyntaxNode): number => {
    if (v.kind !== 'scalar') throw new Error(`${text(p, where)}: expected a scalar, got a ${v.kind}`);
    return v.value;
  };

  const args = (body: SyntaxNode | undefined): SyntaxNode[] => (body === undefined ? [] : children(body));

  const ev = (node: SyntaxNode): Value => {
    switch (node.name) {
      case 'PromQL':
      case 'ParenExpr': {
        const [inner] = children(node);
        if (inner === undefined) throw new Error(`empty ${node.name}`);
        return ev(inner);
      }
      case 'NumberDurationLiteral':
        return { kind: 'scalar', value: Number(text(p, node)) };
      case 'StringLiteral':
        return { kind: 'string', value: stringValue(text(p, node)) };
      case 'VectorSelector':
        return { kind: 'vector', series: select(selectorOf(p, node), after) };
      case 'MatrixSelector': {
        const inner = child(node, 'VectorSelector');
        if (inner === undefined) throw new Error(`${text(p, node)}: a subquery is not supported here`);
        const selector = selectorOf(p, inner);
        const earlier = new Map(select(selector, before).map((s) => [identity(s.labels), s.value]));
        // Prometheus needs two samples in the window: a series that first appeared after `before` has one.
        return {
          kind: 'range',
          series: select(selector, after).flatMap((s) => {
            const first = earlier.get(identity(s.labels));
            return first === undefined ? [] : [{ labels: s.labels, values: [first, s.value] }];
          }),
        };
      }
      case 'FunctionCall': {
        const name = text(p, child(node, 'FunctionIdentifier') ?? node);
        const [first, second] = args(child(node, 'FunctionCallBody')).map((a) => ({ node: a, value: ev(a) }));
        const range = RANGE_FUNCTIONS[name];
        if (range !== undefined) {
          if (first?.value.kind !== 'range') throw new Error(`${name}() takes a range vector`);
          return {
            kind: 'vector',
            series: first.value.series.map((s) => ({ labels: withoutName(s.labels), value: range(s.values, dt) })),
          };
        }
        if (name === 'histogram_quantile' && first !== undefined && second !== undefined) {
          const q = scalar(first.value, first.node);
          const histograms = new Map<
            string,
            { labels: Record<string, string>; buckets: { le: number; count: number }[] }
          >();
          for (const s of vector(second.value, second.node)) {
            const { le, ...rest } = withoutName(s.labels);
            if (le === undefined) continue;
            const id = identity(rest);
            const histogram = histograms.get(id) ?? { labels: rest, buckets: [] };
            histogram.buckets.push({ le: le === '+Inf' ? Number.POSITIVE_INFINITY : Number(le), count: s.value });
            histograms.set(id, histogram);
          }
          return {
            kind: 'vector',
            series: [...histograms.values()].map((h) => ({ labels: h.labels, value: bucketQuantile(q, h.buckets) })),
          };
        }
        throw new Error(`${text(p, node)}: the function ${name} is not supported here`);
      }
      case 'AggregateExpr': {
        const op = text(p, child(node, 'AggregateOp') ?? node);
        const aggregate = AGGREGATIONS[op];
        if (aggregate === undefined) throw new Error(`${text(p, node)}: the aggregation ${op} is not supported here`);
        const modifier = child(node, 'AggregateModifier');
        const grouping = modifier === undefined ? [] : collect(modifier, 'LabelName').map((n) => text(p, n));
        const without = modifier !== undefined && child(modifier, 'Without') !== undefined;
        const [operand] = args(child(node, 'FunctionCallBody'));
        if (operand === undefined) throw new Error(`${text(p, node)}: no operand`);
        const groups = new Map<string, { labels: Record<string, string>; values: number[] }>();
        for (const s of vector(ev(operand), operand)) {
          const labels = without
            ? Object.fromEntries(Object.entries(withoutName(s.labels)).filter(([k]) => !grouping.includes(k)))
            : Object.fromEntries(grouping.flatMap((k) => (s.labels[k] === undefined ? [] : [[k, s.labels[k]]])));
          const id = identity(labels);
          const group = groups.get(id) ?? { labels, values: [] };
          group.values.push(s.value);
          groups.set(id, group);
        }
        return {
          kind: 'vector',
          series: [...groups.values()].map((g) => ({ labels: g.labels, value: aggregate(g.values) })),
        };
      }
      case 'BinaryExpr': {
        const parts = children(node);
        const [lhsNode] = parts;
        const rhsNode = parts.at(-1);
        const opNode = parts[1];
        if (lhsNode === undefined || rhsNode === undefined || opNode === undefined)
          throw new Error('binary expression');
        const modifiers = parts.slice(2, -1).map((m) => m.name);
        const bool = modifiers.includes('BoolModifier');
        if (modifiers.some((m) => m !== 'BoolModifier'))
          throw new Error(`${text(p, node)}: on/ignoring/group_* are not supported here`);
        const lhs = ev(lhsNode);
        const rhs = ev(rhsNode);
        const op = opNode.name;
        if (op === 'Or' || op === 'And' || op === 'Unless') {
          const left = vector(lhs, lhsNode);
          const right = vector(rhs, rhsNode);
          const rightIds = new Set(right.map((s) => identity(withoutName(s.labels))));
          const leftIds = new Set(left.map((s) => identity(withoutName(s.labels))));
          if (op === 'Or')
            return {
              kind: 'vector',
              series: [...left, ...right.filter((s) => !leftIds.has(identity(withoutName(s.labels))))],
            };
          const keep = op === 'And';
          return { kind: 'vector', series: left.filter((s) => rightIds.has(identity(withoutName(s.labels))) === keep) };
        }
        const compare = COMPARISONS[op];
        const arithmetic = ARITHMETIC[op];
        if (compare === undefined && arithmetic === undefined)
          throw new Error(`${text(p, node)}: the operator ${op} is not supported here`);
        const apply = (a: number, b: number, labels: Readonly<Record<string, string>>, keepName: boolean): Series[] => {
          if (arithmetic !== undefined) return [{ labels: withoutName(labels), value: arithmetic(a, b) }];
          const holds = compare?.(a, b) === true;
          if (bool) return [{ labels: withoutName(labels), value: holds ? 1 : 0 }];
          return holds ? [{ labels: keepName ? labels : withoutName(labels), value: a }] : [];
        };
        if (lhs.kind === 'scalar' && rhs.kind === 'scalar') {
          const [result] = apply(lhs.value, rhs.value, {}, false);
          return { kind: 'scalar', value: result?.value ?? Number.NaN };
        }
        if (rhs.kind === 'scalar')
          return {
            kind: 'vector',
            series: vector(lhs, lhsNode).flatMap((s) => apply(s.value, rhs.value, s.labels, true)),
          };
        if (lhs.kind === 'scalar') {
          return {
            kind: 'vector',
            series: vector(rhs, rhsNode).flatMap((s) =>
              apply(lhs.value, s.value, s.labels, false).map((r) =>
                bool || arithmetic ? r : { ...r, value: s.value },
              ),
            ),
          };
        }
        const right = new Map(vector(rhs, rhsNode).map((s) => [identity(withoutName(s.labels)), s.value]));
        return {
          kind: 'vector',
          series: vector(lhs, lhsNode).flatMap((s) => {
            const b = right.get(identity(withoutName(s.labels)));
            return b === undefined ? [] : apply(s.value, b, s.labels, true);
          }),
        };
      }
      default:
        throw new Error(`${text(p, node)}: ${node.name} is not supported here`);
    }
  };
  const result = ev(p.root);
  if (result.kind === 'scalar') return [{ labels: {}, value: result.value }];
  return [...vector(result, p.root)];
}
