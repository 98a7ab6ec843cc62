import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

// Access to the console: a one-time sign-in token (printed in the URL by `pg-settle console`, or
// given in PG_SETTLE_CONSOLE_TOKEN) is exchanged on the first visit for a session cookie
// (HttpOnly, SameSite=Strict), and the browser is redirected to a URL without it, so no secret
// stays in the address bar, the history or a Referer. The running console issues a new one-time
// token on request (`pg-settle console` prints one when Enter is pressed in its terminal): the
// way back in after signing out or an idle session, without a restart. Each session carries its
// own CSRF token, sent back in every form. Sessions end after an idle time and after an absolute
// lifetime.
//
// Browsers send a cookie to every port of its host: the cookie is named per console (its port),
// so two consoles in one browser keep their own sessions, and the server (server.ts) binds the
// session to its own origin with what a page cannot set: every POST must carry the console's
// Origin, and a request another origin's page makes (Fetch Metadata) is refused.

/** The session cookie's name for a console listening on `port`. */
export function cookieName(port: number): string {
  return `pg_settle_console_${port}`;
}

export interface SessionOptions {
  /** The first access token; generated (32 random bytes, base64url) when not given. */
  readonly token?: string;
  /** Whether `token` may be exchanged more than once (a token from the environment: default false). */
  readonly reusableToken?: boolean;
  /** A session ends after this long without a request (default 30 minutes). */
  readonly idleMs?: number;
  /** A session ends this long after it began, whatever its use (default 8 hours). */
  readonly lifetimeMs?: number;
  /** A token issued by `issueToken` expires after this long unused (default 15 minutes). */
  readonly issuedTokenMs?: number;
  readonly now?: () => number;
}

export interface Session {
  readonly id: string;
  readonly csrf: string;
  readonly startedAt: number;
  lastSeenAt: number;
  /** The answers to its last actions by id (server.ts: shown after a redirect), oldest first. */
  readonly answers: Map<string, { readonly status: number; readonly body: string }>;
}

/** Answers a session keeps for their pages (a reload, the back button). */
export const ANSWERS_KEPT = 20;

interface Token {
  readonly reusable: boolean;
  /** When it stops working (Infinity: the first token, which works until used). */
  readonly expiresAt: number;
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
  /** The first access token (printed at start). */
  readonly token: string;
  // Tokens by their SHA-256 (hex): a lookup compares digests, never the secrets themselves.
  private readonly tokens = new Map<string, Token>();
  private readonly sessions = new Map<string, Session>();
  private readonly idleMs: number;
  private readonly lifetimeMs: number;
  private readonly issuedTokenMs: number;
  private readonly now: () => number;

  constructor(options: SessionOptions = {}) {
    this.token = options.token ?? newSecret();
    this.idleMs = options.idleMs ?? 30 * 60_000;
    this.lifetimeMs = options.lifetimeMs ?? 8 * 3_600_000;
    this.issuedTokenMs = options.issuedTokenMs ?? 15 * 60_000;
    this.now = options.now ?? Date.now;
    this.tokens.set(digest(this.token).toString('hex'), {
      reusable: options.reusableToken ?? false,
      expiresAt: Number.POSITIVE_INFINITY,
    });
  }

  /** A new one-time token, valid for `issuedTokenMs`. */
  issueToken(): string {
    const token = newSecret();
    this.tokens.set(digest(token).toString('hex'), { reusable: false, expiresAt: this.now() + this.issuedTokenMs });
    return token;
  }

  /** A new session for a valid token (a one-time token is spent); undefined otherwise. */
  exchange(token: string): Session | undefined {
    const at = this.now();
    for (const [hash, t] of this.tokens) if (t.expiresAt <= at) this.tokens.delete(hash);
    const hash = digest(token).toString('hex');
    const found = this.tokens.get(hash);
    if (found === undefined) return undefined;
    if (!found.reusable) this.tokens.delete(hash);
    const session: Session = { id: newSecret(), csrf: newSecret(), startedAt: at, lastSeenAt: at, answers: new Map() };
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
