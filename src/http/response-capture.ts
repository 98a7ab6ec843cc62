import type { OutgoingHttpHeaders, ServerResponse } from 'node:http';
import type { HttpAnswer } from './core/problem.js';
import type { CapturedResponse } from '../client/stored-response.js';

/** Holds a node ServerResponse back until the middleware has settled it. */
export interface ResponseCapture {
  /** The handler's complete response, or its first bytes once it overflowed `maxBytes`. */
  readonly done: Promise<CapturedResponse>;
  /** Send what the handler produced (and stream the rest after an overflow). */
  release(): void;
  /** Send this instead; whatever the handler writes afterwards is discarded. */
  answer(answer: HttpAnswer): void;
}

type Callback = (error?: Error | null) => void;
/**
 * capturing -> overflowed -> passthrough (release after an overflow), capturing -> complete (the
 * handler ended its response) -> sent (release), capturing|overflowed|complete -> sending -> late
 * (answer: the middleware answered instead, e.g. a handler timeout; what the handler writes from
 * then on is captured against shadow headers, never sent, and still resolves `done` when it ends),
 * capturing -> destroyed (the handler destroyed its response before a byte of it left).
 * In `complete` and `sent`, anything written afterwards (an error handler reached by a throw that
 * came after res.json()) is discarded and reported through `onLate`: the handler's complete
 * response is the one the caller receives, as it is the one stored.
 */
type State = 'capturing' | 'overflowed' | 'complete' | 'sent' | 'sending' | 'passthrough' | 'late' | 'destroyed';

/** Status, status message and headers of the handler's response when it ended. */
interface Frozen {
  readonly status: number;
  readonly message: string;
  readonly headers: OutgoingHttpHeaders;
}

type HeaderValue = string | number | readonly string[];

const toBuffer = (chunk: unknown, encoding?: unknown): Buffer =>
  Buffer.isBuffer(chunk)
    ? chunk
    : chunk instanceof Uint8Array
      ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
      : Buffer.from(String(chunk), typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');

/**
 * Replaces writeHead / write / end / destroy and the header methods on `res` (compression
 * middleware does the same): status and headers stay on `res`, body chunks are buffered. `done`
 * resolves on end(), or as soon as the body exceeds `maxBytes` (the overflow: the caller settles,
 * then release() flushes and the rest streams straight through).
 *
 * A broken body (docs/http.md, "Broken bodies"): once the body started (the first write, or
 * writeHead) Node refuses any change to the head (ERR_HTTP_HEADERS_SENT), so a change means the
 * handler's body broke off and something else answers in its place (Express's error handler,
 * reached by a throw or rejection after res.write()). Before the overflow point nothing has left:
 * the partial body is dropped and that answer is captured as the response, exactly as if the
 * handler had thrown before writing. After it, the key already settled with the committed head:
 * the answer is discarded, and release() sends the head and the bytes so far, then closes the
 * connection instead of framing anything after them. res.destroy() (stream.pipeline calls it
 * when the source fails) before the overflow point closes the connection with nothing sent and
 * resolves `done` as a 500 (a retryable failure); after it, it closes at release the same way.
 */
export function captureResponse(
  res: ServerResponse,
  maxBytes: number,
  onLate: (sentStatus: number, discardedStatus: number) => void = () => {},
): ResponseCapture {
  const original = {
    writeHead: res.writeHead,
    write: res.write,
    end: res.end,
    destroy: res.destroy,
    setHeader: res.setHeader,
    appendHeader: res.appendHeader,
    removeHeader: res.removeHeader,
    getHeader: res.getHeader,
    hasHeader: res.hasHeader,
  };
  let frozen: Frozen | null = null;
  let lateReported = false;
  /** Something wrote after the handler's response was complete: discard it, report it once. */
  const discardLate = (): void => {
    if (lateReported || frozen === null) return;
    lateReported = true;
    onLate(frozen.status, res.statusCode);
  };
  const chunks: Buffer[] = [];
  let size = 0;
  let ended = false;
  let state: State = 'capturing';
  /** The status line when the body started: Node sends the head then and refuses changes after. */
  let committed: { readonly status: number; readonly message: string } | null = null;
  /** The body broke off past the overflow point: the committed head and the bytes so far, then close. */
  let broken = false;
  /** Header calls go here instead of `res` (after the middleware answered, or the body broke off). */
  let shadow: Map<string, HeaderValue> | null = null;
  let resolveDone!: (captured: CapturedResponse) => void;
  const done = new Promise<CapturedResponse>((resolve) => {
    resolveDone = resolve;
  });
  const snapshot = (overflowed: boolean): CapturedResponse => ({
    status: res.statusCode,
    headers:
      shadow === null ? (res.getHeaders() as OutgoingHttpHeaders) : (Object.fromEntries(shadow) as OutgoingHttpHeaders),
    body: Buffer.concat(chunks),
    overflowed,
  });
  const holding = (): boolean => state === 'capturing' || state === 'overflowed' || state === 'complete';
  /** The handler's response is complete: later writes are discarded and reported. */
  const finished = (): boolean => state === 'complete' || state === 'sent' || (state === 'overflowed' && ended);
  /** Writes that go nowhere: after a destroy, or after the body broke off past the overflow point. */
  const dropped = (): boolean => state === 'destroyed' || (state === 'overflowed' && broken);
  const commit = (): void => {
    committed ??= { status: res.statusCode, message: res.statusMessage };
  };
  const breakOff = (): void => {
    broken = true;
    shadow = new Map(); // what the error handler sets from now on never reaches the caller
  };
  /** The head changes after the body started: the body broke off (see above). */
  const headChanges = (): void => {
    if (committed === null) return;
    if (state === 'capturing' || state === 'late') {
      chunks.length = 0;
      size = 0;
      committed = null;
    } else if (state === 'overflowed' && !ended && !broken) {
      breakOff();
    }
  };
  const append = (chunk: unknown, encoding?: unknown): void => {
    if (chunk === undefined || chunk === null || typeof chunk === 'function') return;
    const buffer = toBuffer(chunk, encoding);
    chunks.push(buffer);
    size += buffer.length;
    if (state === 'capturing' && size > maxBytes) {
      state = 'overflowed';
      resolveDone(snapshot(true));
    }
  };
  const later = (callback: unknown): void => {
    if (typeof callback === 'function') process.nextTick(callback as Callback);
  };

  res.setHeader = function setHeader(this: ServerResponse, name: string, value: HeaderValue) {
    headChanges();
    if (shadow === null) return original.setHeader.call(this, name, value);
    shadow.set(name.toLowerCase(), value);
    return this;
  } as ServerResponse['setHeader'];
  res.appendHeader = function appendHeader(this: ServerResponse, name: string, value: string | readonly string[]) {
    headChanges();
    if (shadow === null) return original.appendHeader.call(this, name, value);
    const lower = name.toLowerCase();
    const prior = shadow.get(lower);
    shadow.set(lower, [
      ...(prior === undefined ? [] : Array.isArray(prior) ? prior : [String(prior)]),
      ...(Array.isArray(value) ? value : [value as string]),
    ]);
    return this;
  } as ServerResponse['appendHeader'];
  res.removeHeader = function removeHeader(this: ServerResponse, name: string) {
    headChanges();
    if (shadow === null) original.removeHeader.call(this, name);
    else shadow.delete(name.toLowerCase());
  };
  res.getHeader = function getHeader(this: ServerResponse, name: string) {
    if (shadow === null) return original.getHeader.call(this, name);
    return shadow.get(name.toLowerCase()) as string | number | string[] | undefined;
  };
  res.hasHeader = function hasHeader(this: ServerResponse, name: string) {
    if (shadow === null) return original.hasHeader.call(this, name);
    return shadow.has(name.toLowerCase());
  };

  res.writeHead = function writeHead(this: ServerResponse, status: number, ...rest: unknown[]) {
    if (finished()) {
      if (state !== 'sent') this.statusCode = status;
      discardLate();
      return this;
    }
    if (state === 'destroyed') return this;
    if (!holding() && state !== 'late')
      return (original.writeHead as (...args: unknown[]) => ServerResponse).call(this, status, ...rest);
    const [first, second] = rest;
    const headers = typeof first === 'string' ? second : first;
    const given = Array.isArray(headers)
      ? headers.length > 0
      : headers !== undefined && headers !== null && Object.keys(headers).length > 0;
    if (status !== this.statusCode || given) headChanges();
    if (dropped()) return this;
    this.statusCode = status;
    if (typeof first === 'string') this.statusMessage = first;
    if (Array.isArray(headers)) {
      const pairs: unknown[] = Array.isArray(headers[0])
        ? headers
        : headers.flatMap((_, i) => (i % 2 === 0 ? [[headers[i], headers[i + 1]]] : []));
      for (const pair of pairs) {
        const [name, value] = pair as [string, string];
        this.appendHeader(name, value);
      }
    } else if (headers !== undefined && headers !== null) {
      for (const [name, value] of Object.entries(headers as Record<string, string | string[] | number>))
        this.setHeader(name, value);
    }
    commit();
    return this;
  } as ServerResponse['writeHead'];

  res.write = function write(this: ServerResponse, chunk: unknown, encoding?: unknown, callback?: unknown) {
    if (state === 'passthrough')
      return (original.write as (...args: unknown[]) => boolean).call(this, chunk, encoding, callback);
    const done = typeof encoding === 'function' ? encoding : callback;
    if (finished()) {
      discardLate();
      later(done);
      return true;
    }
    if (committed !== null && this.statusCode !== committed.status) headChanges();
    if (!dropped()) {
      commit();
      append(chunk, encoding);
    }
    later(done);
    return true;
  } as ServerResponse['write'];

  res.end = function end(this: ServerResponse, chunk?: unknown, encoding?: unknown, callback?: unknown) {
    if (state === 'passthrough' || state === 'sending')
      return (original.end as (...args: unknown[]) => ServerResponse).call(this, chunk, encoding, callback);
    const done = typeof chunk === 'function' ? chunk : typeof encoding === 'function' ? encoding : callback;
    if (finished()) {
      discardLate();
      later(done);
      return this;
    }
    if (committed !== null && this.statusCode !== committed.status) headChanges();
    if (dropped()) {
      later(done);
      return this;
    }
    if (ended) return this;
    append(chunk, encoding);
    ended = true;
    later(done);
    if (state === 'capturing' || state === 'overflowed') {
      frozen = { status: this.statusCode, message: this.statusMessage, headers: { ...this.getHeaders() } };
    }
    if (state === 'capturing' || state === 'late') resolveDone(snapshot(false));
    if (state === 'capturing') state = 'complete';
    return this;
  } as ServerResponse['end'];

  res.destroy = function destroy(this: ServerResponse, error?: Error) {
    if (state === 'capturing') {
      // Abandoned before a byte of it left: nothing was sent, the connection closes as asked,
      // and the response counts as the 500 it would have become (a retryable failure).
      state = 'destroyed';
      chunks.length = 0;
      resolveDone({ status: 500, headers: {}, body: Buffer.alloc(0), overflowed: false });
      return original.destroy.call(this, error);
    }
    if (state === 'overflowed' && !ended) {
      if (!broken) breakOff(); // closed by release(), after the committed head and the bytes so far
      return this;
    }
    // The caller has the middleware's answer on this connection: keep it.
    if (state === 'late') return this;
    return original.destroy.call(this, error);
  } as ServerResponse['destroy'];

  const restore = (): void => {
    shadow = null;
    Object.assign(res, original);
  };

  return {
    done,
    release() {
      if (!holding()) return;
      const body = Buffer.concat(chunks);
      chunks.length = 0;
      if (broken && committed !== null) {
        // The key settled with this head: send it and the bytes so far, then close the
        // connection, so nothing after them is ever read as a response.
        restore();
        res.statusCode = committed.status;
        res.statusMessage = committed.message;
        state = 'passthrough';
        res.write(body, () => res.destroy());
        return;
      }
      if (ended && frozen !== null) {
        // Exactly what the handler answered, whatever ran after it (an error handler may have
        // changed the status and headers before its own end() was discarded).
        for (const name of res.getHeaderNames()) if (!(name in frozen.headers)) res.removeHeader(name);
        for (const [name, value] of Object.entries(frozen.headers)) if (value !== undefined) res.setHeader(name, value);
        res.statusCode = frozen.status;
        res.statusMessage = frozen.message;
        state = 'passthrough'; // Node's end() calls writeHead() itself for the implicit head
        (original.end as (chunk: Buffer) => void).call(res, body);
        state = 'sent';
        // From now on writes are discarded and reported (not ERR_STREAM_WRITE_AFTER_END), and
        // header calls work on a private map (Node would throw ERR_HTTP_HEADERS_SENT).
        shadow = new Map();
        return;
      }
      state = 'passthrough';
      restore();
      if (ended) res.end(body);
      else if (body.length > 0) res.write(body);
    },
    answer(answer) {
      if (!holding()) return;
      state = 'sending';
      chunks.length = 0;
      size = 0;
      committed = null;
      broken = false;
      const handlerHeaders = new Map(
        Object.entries(res.getHeaders()).flatMap(([k, v]) => (v === undefined ? [] : [[k, v as HeaderValue]])),
      );
      shadow = null;
      if (!res.headersSent) {
        for (const name of res.getHeaderNames()) res.removeHeader(name);
        for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
        res.statusCode = answer.status;
        res.statusMessage = '';
      }
      (original.end as (chunk: Buffer) => void).call(res, answer.body);
      // After the middleware answered in the handler's place, the handler's own setHeader & co.
      // work on a private map that starts with what it had set (Node would throw
      // ERR_HTTP_HEADERS_SENT, and Express would then destroy the keep-alive socket).
      shadow = handlerHeaders;
      state = 'late';
    },
  };
}
