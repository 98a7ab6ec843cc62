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
 * then on is captured against shadow headers, never sent, and still resolves `done` when it ends).
 * In `complete` and `sent`, anything written afterwards (an error handler reached by a throw that
 * came after res.json()) is discarded and reported through `onLate`: the handler's complete
 * response is the one the caller receives, as it is the one stored.
 */
type State = 'capturing' | 'overflowed' | 'complete' | 'sent' | 'sending' | 'passthrough' | 'late';

/** Status, status message and headers of the handler's response when it ended. */
interface Frozen {
  readonly status: number;
  readonly message: string;
  readonly headers: OutgoingHttpHeaders;
}

const toBuffer = (chunk: unknown, encoding?: unknown): Buffer =>
  Buffer.isBuffer(chunk)
    ? chunk
    : chunk instanceof Uint8Array
      ? Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
      : Buffer.from(String(chunk), typeof encoding === 'string' ? (encoding as BufferEncoding) : 'utf8');

/**
 * Replaces writeHead / write / end on `res` (compression middleware does the same): status and
 * headers stay on `res` (setHeader is untouched), body chunks are buffered. `done` resolves on
 * end(), or as soon as the body exceeds `maxBytes` (the overflow: the caller settles, then
 * release() flushes and the rest streams straight through).
 */
export function captureResponse(
  res: ServerResponse,
  maxBytes: number,
  onLate: (sentStatus: number, discardedStatus: number) => void = () => {},
): ResponseCapture {
  const original = { writeHead: res.writeHead, write: res.write, end: res.end };
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
  let resolveDone!: (captured: CapturedResponse) => void;
  const done = new Promise<CapturedResponse>((resolve) => {
    resolveDone = resolve;
  });
  let shadow: Map<string, string | number | readonly string[]> | null = null;
  const snapshot = (overflowed: boolean): CapturedResponse => ({
    status: res.statusCode,
    headers:
      shadow === null ? (res.getHeaders() as OutgoingHttpHeaders) : (Object.fromEntries(shadow) as OutgoingHttpHeaders),
    body: Buffer.concat(chunks),
    overflowed,
  });
  const holding = (): boolean => state === 'capturing' || state === 'overflowed' || state === 'complete';
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

  res.writeHead = function writeHead(this: ServerResponse, status: number, ...rest: unknown[]) {
    if (state === 'complete' || state === 'sent') {
      if (state === 'complete') this.statusCode = status;
      discardLate();
      return this;
    }
    if (!holding() && state !== 'late')
      return (original.writeHead as (...args: unknown[]) => ServerResponse).call(this, status, ...rest);
    this.statusCode = status;
    const [first, second] = rest;
    if (typeof first === 'string') this.statusMessage = first;
    const headers = typeof first === 'string' ? second : first;
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
    return this;
  } as ServerResponse['writeHead'];

  res.write = function write(this: ServerResponse, chunk: unknown, encoding?: unknown, callback?: unknown) {
    if (state === 'passthrough')
      return (original.write as (...args: unknown[]) => boolean).call(this, chunk, encoding, callback);
    if (state === 'complete' || state === 'sent') {
      discardLate();
      later(typeof encoding === 'function' ? encoding : callback);
      return true;
    }
    append(chunk, encoding);
    later(typeof encoding === 'function' ? encoding : callback);
    return true;
  } as ServerResponse['write'];

  res.end = function end(this: ServerResponse, chunk?: unknown, encoding?: unknown, callback?: unknown) {
    if (state === 'passthrough' || state === 'sending')
      return (original.end as (...args: unknown[]) => ServerResponse).call(this, chunk, encoding, callback);
    if (state === 'complete' || state === 'sent') {
      discardLate();
      later(typeof chunk === 'function' ? chunk : typeof encoding === 'function' ? encoding : callback);
      return this;
    }
    if (ended) return this;
    append(chunk, encoding);
    ended = true;
    later(typeof chunk === 'function' ? chunk : typeof encoding === 'function' ? encoding : callback);
    if (state === 'capturing' || state === 'overflowed') {
      frozen = { status: this.statusCode, message: this.statusMessage, headers: { ...this.getHeaders() } };
    }
    if (state === 'capturing' || state === 'late') resolveDone(snapshot(false));
    if (state === 'capturing') state = 'complete';
    return this;
  } as ServerResponse['end'];

  const restore = (): void => {
    res.writeHead = original.writeHead;
    res.write = original.write;
    res.end = original.end;
  };

  return {
    done,
    release() {
      if (!holding()) return;
      const body = Buffer.concat(chunks);
      chunks.length = 0;
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
        shadowHeaders(res, new Map());
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
      const handlerHeaders = new Map(
        Object.entries(res.getHeaders()).flatMap(([k, v]) =>
          v === undefined ? [] : [[k, v as string | number | readonly string[]]],
        ),
      );
      if (!res.headersSent) {
        for (const name of res.getHeaderNames()) res.removeHeader(name);
        for (const [name, value] of Object.entries(answer.headers)) res.setHeader(name, value);
        res.statusCode = answer.status;
        res.statusMessage = '';
      }
      (original.end as (chunk: Buffer) => void).call(res, answer.body);
      shadow = handlerHeaders;
      shadowHeaders(res, handlerHeaders);
      state = 'late';
    },
  };
}

/**
 * After the middleware answered in the handler's place, the handler's own setHeader & co. work on
 * a private map (Node would throw ERR_HTTP_HEADERS_SENT, and Express would then destroy the
 * keep-alive socket). The map starts with what the handler had set.
 */
function shadowHeaders(res: ServerResponse, shadow: Map<string, string | number | readonly string[]>): void {
  res.setHeader = function setHeader(this: ServerResponse, name: string, value: string | number | readonly string[]) {
    shadow.set(name.toLowerCase(), value);
    return this;
  } as ServerResponse['setHeader'];
  res.appendHeader = function appendHeader(this: ServerResponse, name: string, value: string | readonly string[]) {
    const lower = name.toLowerCase();
    const prior = shadow.get(lower);
    shadow.set(lower, [
      ...(prior === undefined ? [] : Array.isArray(prior) ? prior : [String(prior)]),
      ...(Array.isArray(value) ? value : [value as string]),
    ]);
    return this;
  } as ServerResponse['appendHeader'];
  res.removeHeader = function removeHeader(this: ServerResponse, name: string) {
    shadow.delete(name.toLowerCase());
  };
  res.getHeader = function getHeader(this: ServerResponse, name: string) {
    return shadow.get(name.toLowerCase()) as string | number | string[] | undefined;
  };
  res.hasHeader = function hasHeader(this: ServerResponse, name: string) {
    return shadow.has(name.toLowerCase());
  };
}
