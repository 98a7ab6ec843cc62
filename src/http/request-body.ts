import type { IncomingHttpHeaders } from 'node:http';

/** Whether a request carries a body (RFC 9112 §6.3: Transfer-Encoding, or Content-Length > 0). */
export function hasBody(headers: IncomingHttpHeaders): boolean {
  if (headers['transfer-encoding'] !== undefined) return true;
  const length = headers['content-length'];
  return length !== undefined && Number(length) > 0;
}
