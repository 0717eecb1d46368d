/**
 * The durable backstop of a guard (`IdempotencyOptions.store`): final results in a table
 * with a unique key. Redis replicates asynchronously, so a failover or a restart can lose a
 * fresh record; with a store, `begin` that finds nothing in Redis replays what the store
 * has, and a result whose record Redis lost is written to the store anyway, its unique key
 * fencing a second completion (`DuplicateCompletionError`). `SqlIdempotencyStore` is the
 * SQL one (the Python DurableStore's table, so one table serves every language), over any
 * client with node-postgres's `query(text, values)` (a `pg.Pool`); no driver is a
 * dependency of this package.
 */

/** One final result as a store keeps it. */
export interface StoredFinal {
  /** recordDigest(scope, key): the unique key */
  digest: string;
  key: string;
  fingerprint: string;
  failed: boolean;
  /** the fencing token of the lease that completed it */
  token: bigint;
  result: Buffer;
}

export interface IdempotencyStore {
  /** the final result stored for `digest`, or null */
  get(digest: string): Promise<StoredFinal | null>;
  /** insert `f` unless its digest is there already; resolves to what the store holds */
  put(f: StoredFinal): Promise<StoredFinal>;
}

/** The store already holds another completion: the operation ran twice after Redis lost its record. */
export class DuplicateCompletionError extends Error {
  override name = "DuplicateCompletionError";
  constructor(readonly key: string, /** the completion the store kept (what retries replay) */ readonly stored: StoredFinal) {
    super(`idempotency key ${JSON.stringify(key)} was completed twice (Redis lost its record); the first result is kept`);
  }
}

/** What SqlIdempotencyStore needs of a client: node-postgres's `query` ($1 placeholders). */
export interface SqlQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: Record<string, unknown>[]; rowCount: number | null }>;
}

/** An IdempotencyStore in a PostgreSQL table (tested with node-postgres on a real server). */
export class SqlIdempotencyStore implements IdempotencyStore {
  constructor(readonly db: SqlQueryable, readonly table = "hotkeyd_idempotency") {
    if (!/^[A-Za-z][A-Za-z0-9_]*$/.test(table)) throw new RangeError(`table must be letters, digits and '_', got ${table}`);
  }

  async createTable(): Promise<void> {
    await this.db.query(
      `CREATE TABLE IF NOT EXISTS ${this.table} (digest VARCHAR(64) PRIMARY KEY, idem_key VARCHAR(1024) NOT NULL,` +
        " fingerprint VARCHAR(64) NOT NULL, failed SMALLINT NOT NULL, token BIGINT NOT NULL, result BYTEA NOT NULL)",
    );
  }

  async get(digest: string): Promise<StoredFinal | null> {
    const r = await this.db.query(`SELECT idem_key, fingerprint, failed, token, result FROM ${this.table} WHERE digest = $1`, [digest]);
    const row = r.rows[0];
    if (!row) return null;
    return {
      digest, key: String(row.idem_key), fingerprint: String(row.fingerprint), failed: Number(row.failed) !== 0,
      token: BigInt(String(row.token)), result: Buffer.from(row.result as Buffer),
    };
  }

  async put(f: StoredFinal): Promise<StoredFinal> {
    const r = await this.db.query(
      `INSERT INTO ${this.table} (digest, idem_key, fingerprint, failed, token, result) VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (digest) DO NOTHING`,
      [f.digest, f.key, f.fingerprint, f.failed ? 1 : 0, f.token.toString(), f.result],
    );
    if (r.rowCount === 1) return f;
    return (await this.get(f.digest)) ?? f;
  }
}
