package io.hotkeyd.idempotency;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import javax.sql.DataSource;

/**
 * An {@link IdempotencyStore} over JDBC, in the table of the Python {@code DurableStore}
 * (same columns and digests, so one table serves every language). Tested with
 * PostgreSQL; any database with {@code INSERT ... ON CONFLICT DO NOTHING} works. Each call
 * takes a connection from the {@link DataSource} (a pool in production: HikariCP, or the
 * one Spring Boot configures) and commits on it.
 */
public final class JdbcIdempotencyStore implements IdempotencyStore {
  private final DataSource ds;
  private final String table;

  /** A store in {@code table} (letters, digits and '_'). */
  public JdbcIdempotencyStore(DataSource ds, String table) {
    if (table == null || !table.matches("[A-Za-z][A-Za-z0-9_]*")) {
      throw new IllegalArgumentException("table must be letters, digits and '_', got " + table);
    }
    this.ds = ds;
    this.table = table;
  }

  /** A store in {@code hotkeyd_idempotency}. */
  public JdbcIdempotencyStore(DataSource ds) {
    this(ds, "hotkeyd_idempotency");
  }

  /** Creates the table if it does not exist (BYTEA on PostgreSQL, BLOB elsewhere). */
  public void createTable() {
    try (Connection c = ds.getConnection(); Statement s = c.createStatement()) {
      boolean pg = c.getMetaData().getDatabaseProductName().toLowerCase().contains("postgres");
      s.execute("CREATE TABLE IF NOT EXISTS " + table + " (digest VARCHAR(64) PRIMARY KEY,"
          + " idem_key VARCHAR(1024) NOT NULL, fingerprint VARCHAR(64) NOT NULL,"
          + " failed SMALLINT NOT NULL, token BIGINT NOT NULL, result "
          + (pg ? "BYTEA" : "BLOB") + " NOT NULL)");
      commit(c);
    } catch (SQLException e) {
      throw new IdempotencyUnavailableException("store: " + e.getMessage(), e);
    }
  }

  @Override
  public StoredFinal get(String digest) {
    try (Connection c = ds.getConnection()) {
      StoredFinal f = get(c, digest);
      commit(c);
      return f;
    } catch (SQLException e) {
      throw new IdempotencyUnavailableException("store lookup: " + e.getMessage(), e);
    }
  }

  private StoredFinal get(Connection c, String digest) throws SQLException {
    try (PreparedStatement p = c.prepareStatement("SELECT idem_key, fingerprint, failed, token,"
        + " result FROM " + table + " WHERE digest = ?")) {
      p.setString(1, digest);
      try (ResultSet r = p.executeQuery()) {
        if (!r.next()) {
          return null;
        }
        return new StoredFinal(digest, r.getString(1), r.getString(2), r.getInt(3) != 0,
            r.getLong(4), r.getBytes(5));
      }
    }
  }

  @Override
  public StoredFinal put(StoredFinal f) {
    try (Connection c = ds.getConnection()) {
      int n;
      try (PreparedStatement p = c.prepareStatement("INSERT INTO " + table + " (digest, idem_key,"
          + " fingerprint, failed, token, result) VALUES (?, ?, ?, ?, ?, ?)"
          + " ON CONFLICT (digest) DO NOTHING")) {
        p.setString(1, f.digest());
        p.setString(2, f.key());
        p.setString(3, f.fingerprint());
        p.setInt(4, f.failed() ? 1 : 0);
        p.setLong(5, f.token());
        p.setBytes(6, f.result() == null ? new byte[0] : f.result());
        n = p.executeUpdate();
      }
      StoredFinal held = n == 1 ? f : get(c, f.digest());
      commit(c);
      return held == null ? f : held;
    } catch (SQLException e) {
      throw new IdempotencyUnavailableException("store write: " + e.getMessage(), e);
    }
  }

  private static void commit(Connection c) throws SQLException {
    if (!c.getAutoCommit()) {
      c.commit();
    }
  }
}
