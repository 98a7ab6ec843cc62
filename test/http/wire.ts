// HTTP/1.1 on a raw socket (node:net): the bytes on the wire, read strictly by their framing, so a
// response that carries more (or fewer) bytes than its head announces is seen as such, and several
// requests can share one keep-alive connection. No vitest imports.
import { connect, type Socket } from 'node:net';

/** One response as read off the wire. */
export interface WireResponse {
  readonly status: number;
  /** Lower-case names; repeated fields joined with ", ". */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** The body ended as its framing says (Content-Length reached, or the last chunk read). */
  readonly complete: boolean;
}

export interface WireRequest {
  readonly method?: string;
  readonly key?: string;
  readonly json?: unknown;
  readonly headers?: Readonly<Record<string, string>>;
}

/** A keep-alive connection: send a request, read exactly one response by its framing. */
export interface WireConnection {
  request(path: string, init?: WireRequest): Promise<WireResponse>;
  /** Resolves once the server closed the connection; `trailing` is what arrived after the last response read. */
  readonly closed: Promise<{ trailing: Buffer }>;
  /** How many bytes arrived on the connection so far (a barrier on what left the server). */
  received(): number;
  close(): void;
}

const HEAD_END = Buffer.from('\r\n\r\n');
const CRLF = Buffer.from('\r\n');

export async function openWire(url: string): Promise<WireConnection> {
  const { hostname, port } = new URL(url);
  const socket: Socket = connect({ host: hostname, port: Number(port) });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  let buffered = Buffer.alloc(0);
  let received = 0;
  let ended = false;
  let wake: (() => void) | null = null;
  const notify = (): void => {
    const w = wake;
    wake = null;
    w?.();
  };
  let resolveClosed!: (value: { trailing: Buffer }) => void;
  const closed = new Promise<{ trailing: Buffer }>((resolve) => {
    resolveClosed = resolve;
  });
  socket.on('data', (chunk: Buffer) => {
    buffered = Buffer.concat([buffered, chunk]);
    received += chunk.length;
    notify();
  });
  socket.on('error', () => {}); // a reset is a close here; `closed` reports it
  socket.on('close', () => {
    ended = true;
    resolveClosed({ trailing: buffered });
    notify();
  });
  /** Waits until `ready(buffered)` or the connection closed; false when it closed first. */
  const waitFor = async (ready: () => boolean): Promise<boolean> => {
    for (;;) {
      if (ready()) return true;
      if (ended) return false;
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
  };
  const take = (n: number): Buffer => {
    const out = buffered.subarray(0, n);
    buffered = buffered.subarray(n);
    return Buffer.from(out);
  };

  const readResponse = async (): Promise<WireResponse> => {
    if (!(await waitFor(() => buffered.indexOf(HEAD_END) >= 0))) {
      throw new Error(`the connection closed before a response head (${buffered.length} bytes: ${preview(buffered)})`);
    }
    const head = take(buffered.indexOf(HEAD_END) + HEAD_END.length).toString('latin1');
    const [statusLine = '', ...lines] = head.slice(0, -4).split('\r\n');
    const match = /^HTTP\/1\.1 (\d{3})(?: |$)/.exec(statusLine);
    if (match === null) throw new Error(`not a response head: ${JSON.stringify(statusLine.slice(0, 80))}`);
    const headers: Record<string, string> = {};
    for (const line of lines) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      headers[name] = name in headers ? `${headers[name]}, ${value}` : value;
    }
    const status = Number(match[1]);
    if (status === 204 || status === 304) return { status, headers, body: Buffer.alloc(0), complete: true };
    if (headers['transfer-encoding']?.toLowerCase().includes('chunked')) {
      const parts: Buffer[] = [];
      for (;;) {
        if (!(await waitFor(() => buffered.indexOf(CRLF) >= 0)))
          return { status, headers, body: Buffer.concat([...parts, take(buffered.length)]), complete: false };
        const sizeLine = buffered.subarray(0, buffered.indexOf(CRLF)).toString('latin1');
        const size = Number.parseInt(sizeLine.split(';')[0] ?? '', 16);
        if (!Number.isInteger(size)) throw new Error(`not a chunk size: ${JSON.stringify(sizeLine.slice(0, 80))}`);
        const need = sizeLine.length + 2 + size + 2;
        if (size === 0) {
          // The last chunk, then (trailers and) the empty line.
          if (!(await waitFor(() => buffered.indexOf(HEAD_END, sizeLine.length) >= 0)))
            return { status, headers, body: Buffer.concat(parts), complete: false };
          take(buffered.indexOf(HEAD_END, sizeLine.length) + HEAD_END.length);
          return { status, headers, body: Buffer.concat(parts), complete: true };
        }
        if (!(await waitFor(() => buffered.length >= need))) {
          take(sizeLine.length + 2);
          return { status, headers, body: Buffer.concat([...parts, take(buffered.length)]), complete: false };
        }
        const chunk = take(need);
        parts.push(chunk.subarray(sizeLine.length + 2, sizeLine.length + 2 + size));
      }
    }
    const length = headers['content-length'] === undefined ? null : Number(headers['content-length']);
    if (length === null) {
      // Delimited by the close of the connection.
      await waitFor(() => false);
      return { status, headers, body: take(buffered.length), complete: true };
    }
    if (!(await waitFor(() => buffered.length >= length))) {
      return { status, headers, body: take(buffered.length), complete: false };
    }
    return { status, headers, body: take(length), complete: true };
  };

  return {
    async request(path, init = {}) {
      const body = init.json === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(init.json));
      const fields: Record<string, string> = {
        host: `${hostname}:${port}`,
        ...(init.json === undefined ? {} : { 'content-type': 'application/json' }),
        'content-length': String(body.length),
        ...(init.key === undefined ? {} : { 'idempotency-key': `"${init.key}"` }),
        ...init.headers,
      };
      const head = [
        `${init.method ?? 'POST'} ${path} HTTP/1.1`,
        ...Object.entries(fields).map(([k, v]) => `${k}: ${v}`),
        '',
        '',
      ];
      socket.write(Buffer.concat([Buffer.from(head.join('\r\n'), 'latin1'), body]));
      return readResponse();
    },
    closed,
    received: () => received,
    close() {
      socket.destroy();
    },
  };
}

const preview = (bytes: Buffer): string => JSON.stringify(bytes.subarray(0, 60).toString('latin1'));
