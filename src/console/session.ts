import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

// Access to the console: a one-time access token (printed in the URL by `pg-settle console`, or
// given in PG_SETTLE_CONSOLE_TOKEN) is exchanged on the first visit for a session cookie
// (HttpOnly, SameSite=Strict), and the browser is redirected to a URL without it, so no secret
// stays in the address bar, the history or a Referer. Each session carries its own CSRF token,
// sent back in every form. Sessions end after an idle time and after an absolute lifetime.

export const COOKIE_NAME = 'pg_settle_console';

export interface SessionOptions {
  /** The access token; generated (32 random bytes, base64url) when not given. */
  readonly token?: string;
  /** Whether the token may be exchanged more than once (a token from the environment: default false). */
  readonly reusableToken?: boolean;
  /** A session ends after this long without a request (default 30 minutes). */
  readonly idleMs?: number;
  /** A session ends this long after it began, whatever its use (default 8 hours). */
  readonly lifetimeMs?: number;
  readonly now?: () => number;
}

export interface Session {
  readonly id: string;
  readonly csrf: string;
  readonly startedAt: number;
  lastSeenAt: number;
}

function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

/** Constant-time comparison of two secrets of any length. */
export function sameSecret(given: string, expected: string): boolean {
  return timingSafeEqual(digest(given), digest(expected));
}

export function newSecret(): string {
  return randomBytes(32).toString('base64url');
}

export class SessionStore {
  readonly token: string;
  private tokenUsed = false;
  private readonly sessions = new Map<string, Session>();
  private readonly idleMs: number;
  private readonly lifetimeMs: number;
  private readonly reusable: boolean;
  private readonly now: () => number;

  constructor(options: SessionOptions = {}) {
    this.token = options.token ?? newSecret();
    this.reusable = options.reusableToken ?? false;
    this.idleMs = options.idleMs ?? 30 * 60_000;
    this.lifetimeMs = options.lifetimeMs ?? 8 * 3_600_000;
    this.now = options.now ?? Date.now;
  }

  /** A new session for a valid, unused token; undefined otherwise. */
  exchange(token: string): Session | undefined {
    if ((this.tokenUsed && !this.reusable) || !sameSecret(token, this.token)) return undefined;
    this.tokenUsed = true;
    const at = this.now();
    const session: Session = { id: newSecret(), csrf: newSecret(), startedAt: at, lastSeenAt: at };
    this.sessions.set(session.id, session);
    return session;
  }

  /** The live session of a cookie value (its idle time restarts), or undefined. */
  find(id: string | undefined): Session | undefined {
    if (id === undefined) return undefined;
    const session = this.sessions.get(id);
    if (session === undefined) return undefined;
    const at = this.now();
    if (at - session.lastSeenAt > this.idleMs || at - session.startedAt > this.lifetimeMs) {
      this.sessions.delete(id);
      return undefined;
    }
    session.lastSeenAt = at;
    return session;
  }

  end(id: string): void {
    this.sessions.delete(id);
  }

  /** Seconds a cookie may live: the absolute lifetime (the server enforces the idle time). */
  get cookieMaxAgeSeconds(): number {
    return Math.floor(this.lifetimeMs / 1000);
  }
}

/** The value of one cookie from a Cookie header. */
export function readCookie(header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
