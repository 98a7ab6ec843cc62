/** What the `citus` project's globalSetup hands to its test files (`inject('citus')`). */
declare module 'vitest' {
  export interface ProvidedContext {
    /** The Citus cluster of the `citus` project, or why it could not run here. */
    citus:
      | { readonly unavailable: string }
      | {
          readonly coordinatorUrl: string;
          readonly workers: readonly { readonly node: string; readonly url: string }[];
          /** 'installed' (the Debian PostgreSQL 15's Citus) or PG_SETTLE_CITUS_BIN's directory. */
          readonly build: string;
        };
  }
}

export {};
