/**
 * The settlement feed in the reference model (docs/feed.md): what each registered consumer must
 * receive, what it may receive again, and what it must never receive. Written from the feed's
 * contract, not from the SQL: every final outcome of an operation is one event; a consumer
 * receives every event committed after its registration exactly once, a key's events in the
 * order they were written; a reset re-delivers (the events written at or after its time, or all
 * retained), it never skips an event that commits after it; trim never removes an event a
 * consumer has still to receive.
 *
 * Pure and dependency-free, like protocol-model.ts. Events enter the model as the test sees them
 * commit; the model does not know the horizon, so where the engine may deliver an event or not
 * (committed before a registration at `latest`, or before a reset, above the horizon), the event
 * is in `may`: delivered at most once more, never required.
 */

export interface FeedEvent {
  /** The delivery id (settle.feed_event.event_id), as text. */
  readonly eventId: string;
  /** The operation, `${tenant}/${key}`. */
  readonly id: string;
  readonly status: 'completed' | 'failed';
  /** When the outcome was written (occurred_at), in microseconds. */
  readonly occurredAt: number;
}

export interface FeedConsumerState {
  /** Events it must still receive, each exactly once. */
  readonly must: readonly string[];
  /** Events it may receive once more, or never. */
  readonly may: readonly string[];
  /** How many events it received (acknowledged in a committed transaction). */
  readonly delivered: number;
}

export interface FeedWorld {
  /** Every event committed, in the order the test saw them commit. */
  readonly events: Readonly<Record<string, FeedEvent>>;
  /** Events not trimmed. */
  readonly retained: readonly string[];
  readonly consumers: Readonly<Record<string, FeedConsumerState>>;
}

export const EMPTY_FEED: FeedWorld = { events: {}, retained: [], consumers: {} };

export type FeedCall =
  /** Events seen committed (written by the move of an operation into completed or failed). */
  | { readonly kind: 'committed'; readonly events: readonly FeedEvent[] }
  | { readonly kind: 'register'; readonly name: string; readonly startAt: 'latest' | 'earliest' }
  | { readonly kind: 'drop'; readonly name: string }
  /** to: null (skip to now), '-infinity' (every retained event), or a time in microseconds. */
  | { readonly kind: 'reset'; readonly name: string; readonly to: null | '-infinity' | number }
  /** trim_feed ran; `retained` is what the feed holds after it. */
  | { readonly kind: 'trim'; readonly retained: readonly string[] }
  /** A batch read and acknowledged in a transaction that committed (a rolled-back one changes nothing). */
  | { readonly kind: 'delivered'; readonly name: string; readonly batch: readonly string[] };

export type FeedJudgement =
  | { readonly ok: true; readonly world: FeedWorld }
  | { readonly ok: false; readonly violation: string; readonly detail: string };

const without = (list: readonly string[], drop: readonly string[]): string[] => list.filter((e) => !drop.includes(e));
const byId = (a: string, b: string): number => (BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0);

/** The next feed world after `call`, or the rule it breaks. */
export function feedStep(w: FeedWorld, call: FeedCall): FeedJudgement {
  const ok = (world: FeedWorld): FeedJudgement => ({ ok: true, world });
  const bad = (violation: string, detail: string): FeedJudgement => ({ ok: false, violation, detail });
  const withConsumer = (name: string, c: FeedConsumerState | undefined): FeedWorld => {
    const consumers = { ...w.consumers };
    if (c === undefined) delete consumers[name];
    else consumers[name] = c;
    return { ...w, consumers };
  };
  switch (call.kind) {
    case 'committed': {
      const fresh = call.events.filter((e) => w.events[e.eventId] === undefined);
      if (fresh.length === 0) return ok(w);
      const events = { ...w.events };
      for (const e of fresh) events[e.eventId] = e;
      const ids = fresh.map((e) => e.eventId);
      const consumers: Record<string, FeedConsumerState> = {};
      for (const [name, c] of Object.entries(w.consumers)) consumers[name] = { ...c, must: [...c.must, ...ids] };
      return ok({ events, retained: [...w.retained, ...ids], consumers });
    }
    case 'register':
      // latest: from the horizon on; what committed before may or may not be above it.
      return ok(
        withConsumer(
          call.name,
          call.startAt === 'earliest'
            ? { must: [...w.retained], may: [], delivered: 0 }
            : { must: [], may: [...w.retained], delivered: 0 },
        ),
      );
    case 'drop':
      return ok(withConsumer(call.name, undefined));
    case 'reset': {
      const c = w.consumers[call.name];
      if (c === undefined) return ok(w);
      const to = call.to;
      // A reset re-delivers the retained events written at or after its time (all of them for
      // '-infinity'); the others committed so far may come again (a lane goes no higher than the
      // horizon). Events that commit later are required as always ('committed').
      const must =
        to === null
          ? []
          : to === '-infinity'
            ? [...w.retained]
            : w.retained.filter((e) => (w.events[e]?.occurredAt ?? 0) >= to);
      return ok(withConsumer(call.name, { ...c, must, may: without(w.retained, must) }));
    }
    case 'trim': {
      for (const [name, c] of Object.entries(w.consumers)) {
        const lost = c.must.filter((e) => !call.retained.includes(e));
        if (lost.length > 0)
          return bad('feed-trimmed', `trim_feed removed events ${lost.join(', ')} that ${name} has not received`);
      }
      const retained = w.retained.filter((e) => call.retained.includes(e));
      const consumers: Record<string, FeedConsumerState> = {};
      for (const [name, c] of Object.entries(w.consumers))
        consumers[name] = { ...c, may: c.may.filter((e) => retained.includes(e)) };
      return ok({ ...w, retained, consumers });
    }
    case 'delivered': {
      let c = w.consumers[call.name];
      if (c === undefined) return bad('feed-unregistered', `${call.name} received events while not registered`);
      for (const e of call.batch) {
        const event = w.events[e];
        if (event === undefined)
          return bad('feed-unknown', `${call.name} received event ${e}, which no final outcome wrote`);
        if (c.must.includes(e)) {
          // Per-key order: no earlier event of the key still to receive.
          const earlier = c.must.filter((m) => m !== e && w.events[m]?.id === event.id && byId(m, e) < 0);
          if (earlier.length > 0) {
            return bad(
              'feed-order',
              `${call.name} received event ${e} of ${event.id} before its earlier event ${earlier.join(', ')}`,
            );
          }
          c = { ...c, must: without(c.must, [e]), delivered: c.delivered + 1 };
        } else if (c.may.includes(e)) {
          c = { ...c, may: without(c.may, [e]), delivered: c.delivered + 1 };
        } else {
          return bad(
            'feed-twice',
            `${call.name} received event ${e} of ${event.id} again, without a reset that re-delivers it`,
          );
        }
      }
      return ok(withConsumer(call.name, c));
    }
  }
}

/** What `name` has still to receive (at quiescence, after a drain, it must be nothing). */
export function undelivered(w: FeedWorld, name: string): readonly FeedEvent[] {
  return (w.consumers[name]?.must ?? []).map((e) => w.events[e]).filter((e): e is FeedEvent => e !== undefined);
}
