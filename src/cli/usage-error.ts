/** A bad command line: exit code 2, with the command's usage on stderr. */
export class UsageError extends Error {
  override readonly name: string = 'UsageError';
}

/** A flag that needs a package the installation lacks: one line that says what to install (no usage dump). */
export class MissingPackageError extends UsageError {
  override readonly name: string = 'MissingPackageError';
}

/** A flag the command does not have: one line, with the nearest flag if one is close (no usage dump). */
export class UnknownFlagError extends UsageError {
  override readonly name: string = 'UnknownFlagError';
}
