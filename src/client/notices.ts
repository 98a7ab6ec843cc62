import { SettleCommitUnconfirmedError } from './errors.js';

/** PostgreSQL's warning when a commit's wait for synchronous replication is cancelled. */
const SYNC_REP_CANCELLED = /wait for synchronous replication/i;

/** A SettleCommitUnconfirmedError when `notices` say the commit was not confirmed, else null. */
export function unconfirmedCommit(
  operation: string,
  notices: readonly { readonly message: string }[],
): SettleCommitUnconfirmedError | null {
  if (notices.length === 0) return null;
  const messages = notices.map((notice) => notice.message);
  if (!messages.some((message) => SYNC_REP_CANCELLED.test(message))) return null;
  return new SettleCommitUnconfirmedError(
    `${operation}: committed locally, but the wait for synchronous replication was cancelled; the outcome is unknown`,
    messages,
  );
}
