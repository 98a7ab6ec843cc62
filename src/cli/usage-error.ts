/** A bad command line: exit code 2, with the command's usage on stderr. */
export class UsageError extends Error {
  override readonly name: string = 'UsageError';
}
