import type pg from 'pg';

/**
 * How a client must read the answer of one settle call (Jepsen's ok / fail / info):
 * - `ok`: the statement returned and its commit was acknowledged cleanly;
 * - `fail`: PostgreSQL raised an error, so the transaction rolled back (nothing happened);
 * - `unknown`: the call may or may not have taken effect. Either the connection broke (no
 *   answer, or a FATAL/termination SQLSTATE), or the server answered with a WARNING: the only
 *   warning an autocommitted settle call can get is PostgreSQL's "canceling wait for
 *   synchronous replication" (SQLSTATE 01000), sent when the commit is already local but not
 *   replicated. Rows that come with a warning are NOT an acknowledgement.
 * The engine itself raises no warnings, so the rule is by severity and SQLSTATE class, never by
 * message text.
 */
export type CallAnswer<R> =
  | { readonly kind: 'ok'; readonly rows: R[] }
  | { readonly kind: 'fail'; readonly sqlstate: string; readonly message: string }
  | { readonly kind: 'unknown'; readonly why: string; readonly rows?: R[] };

const SQLSTATE = /^[0-9A-Z]{5}$/;

/** SQLSTATEs after which the commit status of the statement is not known. */
const CONNECTION_LOST_STATES = new Set(['57P01', '57P02', '57P03', '08000', '08003', '08006', '08001', '08004']);

/** Watches notices on `client`; call once per connection before using `settleCall`. */
export function watchNotices(client: pg.Client): void {
  const state = noticeState(client);
  if (state.watching) return;
  state.watching = true;
  client.on('notice', (notice) => {
    if (notice.severity === 'WARNING' || (notice.code ?? '').startsWith('01')) state.warnings.push(notice.code ?? '');
  });
}

/** Runs one autocommitted statement and classifies its answer (see CallAnswer). */
export async function settleCall<R extends pg.QueryResultRow>(
  client: pg.Client,
  text: string,
  values: readonly unknown[],
): Promise<CallAnswer<R>> {
  const state = noticeState(client);
  if (!state.watching) throw new Error('settleCall: call watchNotices(client) first');
  state.warnings.length = 0;
  let rows: R[];
  try {
    rows = (await client.query<R>(text, [...values])).rows;
  } catch (error) {
    // Socket errors carry Node codes (ECONNRESET, EPIPE): not an SQLSTATE, so not a rollback.
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string' && SQLSTATE.test(code) && !CONNECTION_LOST_STATES.has(code)) {
      return { kind: 'fail', sqlstate: code, message: (error as Error).message };
    }
    return {
      kind: 'unknown',
      why: `connection lost${typeof code === 'string' ? ` (${code})` : ''}: ${(error as Error).message}`,
    };
  }
  if (state.warnings.length > 0) {
    return {
      kind: 'unknown',
      why: `server warning ${state.warnings.join(',')} with the answer (commit not acknowledged)`,
      rows,
    };
  }
  return { kind: 'ok', rows };
}

interface NoticeState {
  watching: boolean;
  readonly warnings: string[];
}

const states = new WeakMap<pg.Client, NoticeState>();

function noticeState(client: pg.Client): NoticeState {
  let state = states.get(client);
  if (state === undefined) {
    state = { watching: false, warnings: [] };
    states.set(client, state);
  }
  return state;
}
