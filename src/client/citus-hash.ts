/**
 * PostgreSQL's `hashtext(text)` in TypeScript, so the typed client can route a key to the Citus
 * node holding its shard without asking the coordinator: Citus hashes a text distribution column
 * with it and the key's shard is the one whose [shardminvalue, shardmaxvalue] holds the hash.
 *
 * For a deterministic collation (the default) `hashtext` is `hash_bytes()` over the value's bytes
 * in the server encoding (PostgreSQL src/common/hashfn.c: Bob Jenkins' lookup3 hash, public
 * domain, as adapted by PostgreSQL). This is its little-endian path, the one x86-64 and arm64
 * servers run: the aligned and unaligned reads there both amount to little-endian 32-bit words,
 * and the last 0..11 bytes go into a, b and c, skipping c's lowest byte (lookup3 reserves it). It
 * assumes a UTF8 database (the bytes hashed are the value's UTF-8 encoding); PostgreSQL's text
 * holds no NUL character. test/client/citus-hash.test.ts compares it with a real server.
 */

const rot = (x: number, k: number): number => (x << k) | (x >>> (32 - k));

/** What PostgreSQL's `hashtext(value)` returns (a signed int32), in a UTF8 database. */
export function postgresHashText(value: string): number {
  const key = Buffer.from(value, 'utf8');
  const blocks = Math.floor(key.length / 12);
  // Whole 12-byte blocks, then the tail zero-padded to one more block: zero bytes add nothing.
  const padded = new Uint8Array((blocks + 1) * 12);
  padded.set(key);
  const view = new DataView(padded.buffer);
  const word = (index: number): number => view.getUint32(index * 4, true) | 0;

  let a = (0x9e3779b9 + key.length + 3923095) | 0;
  let b = a;
  let c = a;
  for (let block = 0; block < blocks; block += 1) {
    a = (a + word(block * 3)) | 0;
    b = (b + word(block * 3 + 1)) | 0;
    c = (c + word(block * 3 + 2)) | 0;
    // mix(a, b, c)
    a = (a - c) | 0;
    a ^= rot(c, 4);
    c = (c + b) | 0;
    b = (b - a) | 0;
    b ^= rot(a, 6);
    a = (a + c) | 0;
    c = (c - b) | 0;
    c ^= rot(b, 8);
    b = (b + a) | 0;
    a = (a - c) | 0;
    a ^= rot(c, 16);
    c = (c + b) | 0;
    b = (b - a) | 0;
    b ^= rot(a, 19);
    a = (a + c) | 0;
    c = (c - b) | 0;
    c ^= rot(b, 4);
    b = (b + a) | 0;
  }
  // The tail switch: bytes 0..3 into a, 4..7 into b, 8..10 into c shifted past its lowest byte.
  a = (a + word(blocks * 3)) | 0;
  b = (b + word(blocks * 3 + 1)) | 0;
  c = (c + (word(blocks * 3 + 2) << 8)) | 0;
  // final(a, b, c)
  c ^= b;
  c = (c - rot(b, 14)) | 0;
  a ^= c;
  a = (a - rot(c, 11)) | 0;
  b ^= a;
  b = (b - rot(a, 25)) | 0;
  c ^= b;
  c = (c - rot(b, 16)) | 0;
  a ^= c;
  a = (a - rot(c, 4)) | 0;
  b ^= a;
  b = (b - rot(a, 14)) | 0;
  c ^= b;
  c = (c - rot(b, 24)) | 0;
  return c;
}
