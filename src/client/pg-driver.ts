import { createRequire } from 'node:module';
import { Transform } from 'node:stream';
import pg from 'pg';
import QueryStream from 'pg-query-stream';
import {
  BackendTerminatedError,
  BackendTerminatedUnexpectedlyError,
  CheckExclusionConstraintViolationError,
  CheckIntegrityConstraintViolationError,
  createDriverFactory,
  type DriverConfiguration,
  type DriverFactory,
  type DriverTypeParser,
  ForeignKeyIntegrityConstraintViolationError,
  IdleTransactionTimeoutError,
  InputSyntaxError,
  InvalidInputError,
  NotNullIntegrityConstraintViolationError,
  parseDsn,
  StatementCancelledError,
  StatementTimeoutError,
  UnexpectedStateError,
  UniqueIntegrityConstraintViolationError,
} from 'slonik';

/**
 * The slonik driver of the client's own pool: slonik's pg driver (@slonik/pg-driver 49.10.9,
 * createPgDriverFactory) with one change on the path of named prepared statements. node-pg asks
 * the server for a statement's RowDescription (a Describe message) on every execution, parses
 * it and rebuilds the row template and type parsers from it, though a named statement's row
 * type cannot change while the statement exists: PostgreSQL refuses to run a prepared statement
 * whose result type changed (0A000, "cached plan must not change result type"), and a statement
 * that is gone fails (26000). This driver describes a named statement once per connection,
 * keeps what node-pg built from that description, and afterwards sends only Bind, Execute and
 * Sync, as `pgbench -M prepared` does. Any error on a named statement forgets its description,
 * so the next execution describes it again. Everything else (the configuration node-pg gets,
 * the type parsers, unnamed queries, streams, error wrapping) is slonik's driver as is, so the
 * pool behaves as slonik's own: the same errors, events and states.
 *
 * It also gives the short-lived connection that reads pg_type at pool creation an 'error'
 * listener (slonik's has none: a backend terminated in those milliseconds became an uncaught
 * exception, docs/client.md "Upstream hazard at pool creation"); the error then fails
 * createPool, and the client's next call tries again.
 */
export function createSettleDriverFactory(): DriverFactory {
  return createDriverFactory(async ({ driverConfiguration }) => {
    const clientConfiguration = createClientConfiguration(driverConfiguration);
    clientConfiguration.types = { getTypeParser: await queryTypeOverrides(clientConfiguration, driverConfiguration) };
    return {
      createPoolClient: async ({ clientEventEmitter }) => {
        let perConnectionConfig = clientConfiguration;
        if (typeof driverConfiguration.password === 'function') {
          perConnectionConfig = { ...clientConfiguration, password: await driverConfiguration.password() };
        }
        const client = new pg.Client(perConnectionConfig);
        // What node-pg built from each named statement's RowDescription on this connection.
        const described = new Map<string, Description>();
        const onError = (error: Error) => {
          clientEventEmitter.emit('error', wrapError(error, null));
        };
        const onNotice = (notice: { message?: string }) => {
          if (notice.message) clientEventEmitter.emit('notice', { message: notice.message });
        };
        client.on('error', onError);
        client.on('notice', onNotice);
        return {
          connect: async () => {
            try {
              await client.connect();
            } catch (error) {
              client.removeListener('error', onError);
              client.removeListener('notice', onNotice);
              throw error;
            }
          },
          end: async () => {
            await client.end();
            client.removeListener('error', onError);
            client.removeListener('notice', onNotice);
          },
          query: async (sql, values, queryOptions) => {
            let result: pg.QueryResult;
            try {
              result =
                queryOptions?.name === undefined || queryOptions.name === ''
                  ? await client.query(sql, values)
                  : await runNamed(client, described, queryOptions.name, sql, values);
            } catch (error) {
              throw wrapError(error as Error, { sql, values: values ?? [] });
            }
            if (Array.isArray(result))
              throw new InvalidInputError('Must not use multiple statements in a single query.');
            return {
              command: result.command as 'SELECT',
              fields: result.fields.map((field) => ({ dataTypeId: field.dataTypeID, name: field.name })),
              rowCount: result.rowCount,
              rows: result.rows as Record<string, unknown>[],
            };
          },
          stream: (sql, values) => {
            const stream = client.query(new QueryStream(sql, values as unknown[]));
            let fields: { dataTypeId: number; name: string }[] = [];
            // `rowDescription` does not fire on a syntax error, nor before the stream is consumed.
            const onRowDescription = (rowDescription: { fields: pg.FieldDef[] }) => {
              fields = rowDescription.fields.map((field) => ({ dataTypeId: field.dataTypeID, name: field.name }));
            };
            const connection = (client as unknown as { connection: pg.Connection }).connection;
            connection.once('rowDescription', onRowDescription);
            stream.once('close', () => {
              connection.removeListener('rowDescription', onRowDescription);
            });
            const transform = new Transform({
              objectMode: true,
              transform(datum: Record<string, unknown>, _encoding, callback) {
                this.push({ fields, row: datum });
                callback();
              },
            });
            stream.on('error', (error: Error) => {
              transform.emit('error', wrapError(error, { sql, values: (values ?? []) as readonly unknown[] }));
            });
            return stream.pipe(transform) as never;
          },
        };
      },
    };
  });
}

/** What node-pg's Result builds from a RowDescription (pg 8.23: Result.addFields). */
interface Description {
  readonly fields: unknown[];
  readonly parsers: unknown[];
  readonly empty: object;
}

/** node-pg's internals the named path uses (pg 8.23.1, lib/query.js and lib/result.js). */
interface QueryInternals {
  name?: string;
  text: string;
  values?: unknown[];
  portal: string;
  binary?: boolean;
  rows?: number;
  callback?: unknown;
  _accumulateRows: unknown;
  _result: { fields: unknown[]; _parsers?: unknown[]; _prebuiltEmptyResultObject: object | null };
  hasBeenParsed(connection: PgConnection): boolean;
  handleError(error: Error, connection: PgConnection): void;
  _getRows(connection: PgConnection, rows: number | undefined): void;
}
interface PgConnection {
  bind(config: object): void;
  close(config: object): void;
  sync(): void;
}

const prepareValue = (
  createRequire(import.meta.url)('pg/lib/utils.js') as { prepareValue: (value: unknown) => unknown }
).prepareValue;

/**
 * A named statement's Query: the first execution on a connection is node-pg's own (Parse if not
 * yet parsed, Bind, Describe, Execute, Sync) and keeps what its RowDescription built; later ones
 * skip Describe and install that. An error forgets it.
 */
class DescribedQuery extends pg.Query {
  constructor(
    text: string,
    values: unknown[] | undefined,
    name: string,
    private readonly described: Map<string, Description>,
    callback: (error: Error | undefined, result: pg.QueryResult) => void,
  ) {
    super(text, values, callback);
    (this as unknown as QueryInternals).name = name;
  }

  prepare(connection: PgConnection): void {
    const self = this as unknown as QueryInternals & { name: string };
    const description = this.described.get(self.name);
    if (description === undefined || !self.hasBeenParsed(connection)) {
      (pg.Query.prototype as unknown as { prepare(connection: PgConnection): void }).prepare.call(this, connection);
      return;
    }
    try {
      connection.bind({
        portal: self.portal,
        statement: self.name,
        values: self.values,
        binary: self.binary,
        valueMapper: prepareValue,
      });
    } catch (error) {
      // node-pg's own handling of a value that cannot be serialized (lib/query.js prepare).
      this.described.delete(self.name);
      connection.close({ type: 'S', name: self.name });
      connection.sync();
      self.handleError(error as Error, connection);
      return;
    }
    const result = self._result;
    result.fields = description.fields;
    result._parsers = description.parsers;
    result._prebuiltEmptyResultObject = description.empty;
    self._accumulateRows = true;
    self._getRows(connection, self.rows);
  }

  handleRowDescription(message: unknown): void {
    (pg.Query.prototype as unknown as { handleRowDescription(message: unknown): void }).handleRowDescription.call(
      this,
      message,
    );
    const self = this as unknown as QueryInternals & { name: string };
    const { fields, _parsers: parsers, _prebuiltEmptyResultObject: empty } = self._result;
    if (Array.isArray(parsers) && empty !== null && typeof empty === 'object') {
      this.described.set(self.name, { fields, parsers, empty });
    }
  }

  handleError(error: Error, connection: PgConnection): void {
    this.described.delete((this as unknown as { name: string }).name);
    (pg.Query.prototype as unknown as QueryInternals).handleError.call(this, error, connection);
  }
}

function runNamed(
  client: pg.Client,
  described: Map<string, Description>,
  name: string,
  text: string,
  values: readonly unknown[] | undefined,
): Promise<pg.QueryResult> {
  return new Promise((resolve, reject) => {
    void client.query(
      new DescribedQuery(text, values as unknown[] | undefined, name, described, (error, result) =>
        error ? reject(error) : resolve(result),
      ),
    );
  });
}

// ---- Below: @slonik/pg-driver 49.10.9 (dist/factories/createPgDriverFactory.js), unchanged in behaviour.

type PgClientConfig = pg.ClientConfig & {
  types?: { getTypeParser: (oid: number) => (value: string) => unknown };
  statement_timeout?: number;
  idle_in_transaction_session_timeout?: number;
  options?: string;
};

const createTypeOverrides = async (connection: pg.Client, typeParsers: readonly DriverTypeParser[]) => {
  const typeNames = typeParsers.map((typeParser) => typeParser.name);
  const postgresTypes = (
    await connection.query<{ oid: number; typarray: number; typname: string }>(
      `
        SELECT
          oid,
          typarray,
          typname
        FROM pg_type
        WHERE typname = ANY($1::text[])
      `,
      [typeNames],
    )
  ).rows;
  const parsers: Record<number, (value: string) => unknown> = {};
  for (const typeParser of typeParsers) {
    const postgresType = postgresTypes.find((candidate) => candidate.typname === typeParser.name);
    if (!postgresType) throw new Error('Database type "' + typeParser.name + '" not found.');
    parsers[postgresType.oid] = (value) => typeParser.parse(value);
    if (postgresType.typarray) {
      parsers[postgresType.typarray] = (arrayValue) => parseArray(arrayValue).map((value) => typeParser.parse(value));
    }
  }
  return (oid: number): ((value: string) => unknown) =>
    parsers[oid] ?? (pg.types.getTypeParser(oid) as (value: string) => unknown);
};

/** postgres-array's parser (the one @slonik/pg-driver uses), as pg-types exposes it. */
const parseArray = (value: string): string[] =>
  (
    pg.types as unknown as {
      arrayParser: { create(source: string, transform: (entry: string) => string): { parse(): string[] } };
    }
  ).arrayParser
    .create(value, (entry) => entry)
    .parse();

const createClientConfiguration = (clientConfiguration: DriverConfiguration): PgClientConfig => {
  const connectionOptions = parseDsn(clientConfiguration.connectionUri);
  const poolConfiguration: PgClientConfig & { queryMode?: string } = {
    application_name: connectionOptions.applicationName,
    database: connectionOptions.databaseName,
    host: connectionOptions.host,
    options: connectionOptions.options,
    password: (clientConfiguration.password as string | undefined) ?? connectionOptions.password,
    port: connectionOptions.port,
    queryMode: 'extended',
    ssl: false,
    user: connectionOptions.username,
  };
  if (clientConfiguration.ssl) {
    poolConfiguration.ssl = clientConfiguration.ssl;
  } else if (connectionOptions.sslMode === 'disable') {
    poolConfiguration.ssl = false;
  } else if (connectionOptions.sslMode === 'require') {
    poolConfiguration.ssl = true;
  } else if (connectionOptions.sslMode === 'no-verify') {
    poolConfiguration.ssl = { rejectUnauthorized: false };
  }
  if (clientConfiguration.connectionTimeout !== 'DISABLE_TIMEOUT') {
    poolConfiguration.connectionTimeoutMillis =
      clientConfiguration.connectionTimeout === 0 ? 1 : clientConfiguration.connectionTimeout;
  }
  if (clientConfiguration.statementTimeout !== 'DISABLE_TIMEOUT') {
    poolConfiguration.statement_timeout =
      clientConfiguration.statementTimeout === 0 ? 1 : clientConfiguration.statementTimeout;
  }
  if (clientConfiguration.idleInTransactionSessionTimeout !== 'DISABLE_TIMEOUT') {
    poolConfiguration.idle_in_transaction_session_timeout =
      clientConfiguration.idleInTransactionSessionTimeout === 0
        ? 1
        : clientConfiguration.idleInTransactionSessionTimeout;
  }
  return poolConfiguration;
};

const queryTypeOverrides = async (pgClientConfiguration: PgClientConfig, driverConfiguration: DriverConfiguration) => {
  const client = new pg.Client(pgClientConfiguration);
  // slonik's driver listens to nothing here: a backend terminated now would be an uncaught
  // 'error'. The failure reaches createPool through the query or connect instead.
  client.on('error', () => {});
  try {
    await client.connect();
    return await createTypeOverrides(client, driverConfiguration.typeParsers);
  } finally {
    await client.end();
  }
};

type QueryForError = { sql: string; values: readonly unknown[] } | null;

const wrapError = (error: Error, query: QueryForError): Error => {
  if (error.message.toLowerCase().includes('connection terminated unexpectedly'))
    return new BackendTerminatedUnexpectedlyError(error);
  if (error.message.toLowerCase().includes('connection terminated')) return new BackendTerminatedError(error);
  if (!('code' in error)) return error;
  const code = (error as { code?: unknown }).code;
  const withCode = error as Error & { code: string };
  if (code === '22P02') return new InvalidInputError(error.message);
  if (code === '25P03') return new IdleTransactionTimeoutError(withCode);
  if (code === '57P01') return new BackendTerminatedError(withCode);
  if (code === '57014' && error.message.includes('canceling statement due to user request'))
    return new StatementCancelledError(withCode);
  if (code === '57014') return new StatementTimeoutError(withCode);
  if (code === '23502') return new NotNullIntegrityConstraintViolationError(withCode as never);
  if (code === '23503') return new ForeignKeyIntegrityConstraintViolationError(withCode as never);
  if (code === '23505') return new UniqueIntegrityConstraintViolationError(withCode as never);
  if (code === '23P01') return new CheckExclusionConstraintViolationError(withCode as never);
  if (code === '23514') return new CheckIntegrityConstraintViolationError(withCode as never);
  if (code === '42601') {
    if (!query) return new UnexpectedStateError('Expected query to be provided');
    return new InputSyntaxError(withCode as never, query as never);
  }
  return error;
};
