package io.hotkeyd;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/** A Redis key as hotkeyd identifies it: its bytes and its db. Immutable; cheap to hash. */
public final class KeyId {
  private final byte[] key;
  private final int db;
  private final int hash;

  public KeyId(byte[] key, int db) {
    this.key = key;
    this.db = db;
    this.hash = Arrays.hashCode(key) * 31 + db;
  }

  public static KeyId of(Object key) {
    return new KeyId(Keys.toBytes(key), 0);
  }

  public static KeyId of(Object key, int db) {
    return new KeyId(Keys.toBytes(key), db);
  }

  /** The key bytes (do not modify). */
  public byte[] key() {
    return key;
  }

  public int db() {
    return db;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof KeyId k && k.hash == hash && k.db == db && Arrays.equals(k.key, key);
  }

  @Override
  public int hashCode() {
    return hash;
  }

  @Override
  public String toString() {
    String text = new String(key, StandardCharsets.UTF_8);
    return db == 0 ? text : text + "@" + db;
  }
}
