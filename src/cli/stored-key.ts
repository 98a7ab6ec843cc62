import { OperationNotFoundError } from '../client/errors.js';
import { type CommandInput, stringFlag } from './command.js';
import { UsageError } from './usage-error.js';

/** The help line of `--key-prefix`, shared by the commands that take a key. */
export const KEY_PREFIX_HELP = `  --key-prefix PREFIX  the HTTP middleware's keyPrefix (e.g. http:): <key> is then the client's
                       Idempotency-Key and the operation is the stored PREFIX<key> (default: none,
                       <key> is the stored key)`;

/** `--key-prefix`, validated as the middleware validates its keyPrefix; undefined when not given. */
export function keyPrefixFlag(input: CommandInput): string | undefined {
  const prefix = stringFlag(input, 'key-prefix');
  if (prefix === undefined) return undefined;
  if (!/^[!-~]{1,64}$/.test(prefix))
    throw new UsageError(
      `--key-prefix must be 1-64 visible ASCII characters, as keyPrefix (got ${JSON.stringify(prefix)})`,
    );
  return prefix;
}

/** The key the engine stores for `key`: `--key-prefix` + key, or key itself. */
export function storedKeyOf(input: CommandInput, key: string): string {
  return `${keyPrefixFlag(input) ?? ''}${key}`;
}

/**
 * No operation under (tenant, key): says what a key of the HTTP middleware with a keyPrefix is
 * stored as, which is what an operator holding the client's Idempotency-Key most often misses.
 */
export function operationNotFound(tenant: string, key: string, input: CommandInput): OperationNotFoundError {
  const prefix = keyPrefixFlag(input);
  const hint =
    prefix === undefined
      ? 'No such operation: never claimed, or purged. Tenant and key are case-sensitive. A key of the HTTP ' +
        'middleware whose route sets keyPrefix is stored as <keyPrefix><Idempotency-Key> (keyPrefix "http:": ' +
        `http:${key}): give that stored key, or the client's key with --key-prefix PREFIX.`
      : `No operation under the stored key ${key} (--key-prefix ${prefix} and the client's key): never claimed, or ` +
        'purged, or the route uses another keyPrefix. Tenant and key are case-sensitive.';
  return new OperationNotFoundError(`operation not found: ${tenant} / ${key}`, {
    code: 'SE010',
    sqlstate: 'SE010',
    detail: { tenant, key },
    hint,
  });
}
