package io.hotkeyd.idempotency;

import io.hotkeyd.Limits;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.HexFormat;

/**
 * Keys and fingerprints, computed as every hotkeyd client does
 * ({@code spec/vectors/idempotency.json}), so that records are shared across languages.
 */
public final class IdempotencyKeys {
  /** The longest key a client may send in an Idempotency-Key header (spec/limits.json). */
  public static final int MAX_HEADER_KEY = (int) Limits.get("idempotency_key_chars_max");

  private IdempotencyKeys() {}

  private static String digest32(byte[]... parts) {
    MessageDigest h;
    try {
      h = MessageDigest.getInstance("SHA-256");
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
    for (byte[] p : parts) { // length-prefixed, so ("ab", "c") and ("a", "bc") differ
      h.update(ByteBuffer.allocate(8).putLong(p.length).array());
      h.update(p);
    }
    return HexFormat.of().formatHex(h.digest()).substring(0, 32);
  }

  /** The fixed-length fingerprint of a request's parts (e.g. method, path, query, body). */
  public static String fingerprint(byte[]... parts) {
    return digest32(parts);
  }

  /** {@link #fingerprint(byte[]...)} of UTF-8 strings. */
  public static String fingerprint(String... parts) {
    byte[][] b = new byte[parts.length][];
    for (int i = 0; i < parts.length; i++) {
      b[i] = parts[i].getBytes(StandardCharsets.UTF_8);
    }
    return digest32(b);
  }

  /** The fixed-length name of {@code key} within {@code scope}: what Redis sees. */
  /**
   * The scope of an HTTP caller's keys, the same in every language: {@code "a"} and the
   * digest of the Authorization header (null counts as empty), or with a user {@code "u"}
   * and the digest of the user. The middleware's key is {@code scope + ":" + key}.
   */
  public static String callerScope(String authorization, String user) {
    return user != null ? "u" + fingerprint(user)
        : "a" + fingerprint(authorization == null ? "" : authorization);
  }

  public static String recordDigest(String scope, String key) {
    return digest32(scope.getBytes(StandardCharsets.UTF_8), key.getBytes(StandardCharsets.UTF_8));
  }

  /**
   * Returns {@code key} if it is 1..maxLength printable ASCII characters.
   *
   * @throws IdempotencyKeyException otherwise
   */
  public static String checkKey(String key, int maxLength) {
    if (key == null || key.isEmpty()) {
      throw new IdempotencyKeyException("idempotency key is empty");
    }
    if (key.length() > maxLength) {
      throw new IdempotencyKeyException("idempotency key is " + key.length()
          + " characters; at most " + maxLength + " are allowed");
    }
    for (int i = 0; i < key.length(); i++) {
      char c = key.charAt(i);
      if (c < 0x20 || c > 0x7e) {
        throw new IdempotencyKeyException("idempotency key must be printable ASCII (0x20-0x7E)");
      }
    }
    return key;
  }
}
