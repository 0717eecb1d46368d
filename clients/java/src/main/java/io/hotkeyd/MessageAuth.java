package io.hotkeyd;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * Optional message authentication (docs/wire-format.md, "Signed messages"): HMAC-SHA256 with
 * a shared key over the exact bytes, no JSON canonicalization. A signed message is the
 * unsigned JSON {@code body} with its last byte ({@code }}) replaced by {@code ,"sig":"<64
 * hex>"}}. The first key signs; every key verifies (rotation).
 */
public final class MessageAuth {
  public static final String ENV_VAR = "HOTKEYD_AUTH_KEY";
  /** The reporter key that signs demand reports (never the daemon's signing key). */
  public static final String DEMAND_KEY_ENV = "HOTKEYD_DEMAND_KEY";
  /** A file of reporter keys, one a line (the first signs); wins over DEMAND_KEY_ENV. */
  public static final String DEMAND_KEY_FILE_ENV = "HOTKEYD_DEMAND_KEY_FILE";
  public static final int MIN_KEY_BYTES = Limits.AUTH_KEY_BYTES_MIN;
  private static final byte[] HEAD = ",\"sig\":\"".getBytes(StandardCharsets.US_ASCII);
  static final int SUFFIX_LEN = HEAD.length + 64 + 2;
  private static final HexFormat HEX = HexFormat.of();

  private final List<byte[]> keys;

  public MessageAuth(List<byte[]> keys) {
    if (keys.isEmpty()) {
      throw new HotkeydException("message authentication: no key given");
    }
    for (byte[] k : keys) {
      if (k.length < MIN_KEY_BYTES) {
        throw new HotkeydException(
            "message authentication: a key must have at least " + MIN_KEY_BYTES + " bytes");
      }
    }
    this.keys = List.copyOf(keys);
  }

  /** Keys from a file, one per line (blank lines ignored): the daemon's --auth-key-file. */
  public static MessageAuth fromFile(Path path) throws IOException {
    List<byte[]> keys = new ArrayList<>();
    for (String line : Files.readString(path, StandardCharsets.UTF_8).split("\n")) {
      String k = line.endsWith("\r") ? line.substring(0, line.length() - 1) : line;
      if (!k.isBlank()) {
        keys.add(k.getBytes(StandardCharsets.UTF_8));
      }
    }
    return new MessageAuth(keys);
  }

  /** The key in {@code HOTKEYD_AUTH_KEY}, or null when it is unset or empty. */
  public static MessageAuth fromEnv() {
    String v = System.getenv(ENV_VAR);
    return v == null || v.isEmpty() ? null
        : new MessageAuth(List.of(v.getBytes(StandardCharsets.UTF_8)));
  }

  /**
   * The reporter key that signs demand reports: the file named by
   * {@code HOTKEYD_DEMAND_KEY_FILE}, else {@code HOTKEYD_DEMAND_KEY}; null when neither is set
   * (reports then go unsigned, and a daemon requiring signed ones drops and counts them).
   *
   * @throws HotkeydException when the file cannot be read or holds no usable key
   */
  public static MessageAuth reporterKeyFromEnv() {
    return reporterKeyFrom(System.getenv());
  }

  static MessageAuth reporterKeyFrom(java.util.Map<String, String> env) {
    String path = env.get(DEMAND_KEY_FILE_ENV);
    if (path != null && !path.isEmpty()) {
      try {
        return fromFile(Path.of(path));
      } catch (IOException e) {
        throw new HotkeydException("reporter key file " + path + ": " + e.getMessage());
      }
    }
    String v = env.get(DEMAND_KEY_ENV);
    return v == null || v.isEmpty() ? null
        : new MessageAuth(List.of(v.getBytes(StandardCharsets.UTF_8)));
  }

  @Override
  public String toString() { // never the keys
    return "MessageAuth(" + keys.size() + " key(s))";
  }

  byte[] mac(byte[] body, byte[] key) {
    try {
      Mac m = Mac.getInstance("HmacSHA256");
      m.init(new SecretKeySpec(key, "HmacSHA256"));
      return HEX.formatHex(m.doFinal(body)).getBytes(StandardCharsets.US_ASCII);
    } catch (GeneralSecurityException e) {
      throw new HotkeydException("HMAC-SHA256 unavailable", e);
    }
  }

  /** {@code body} (a JSON object's bytes) with the {@code sig} field appended. */
  public byte[] sign(byte[] body) {
    if (body.length == 0 || body[body.length - 1] != '}') {
      throw new IllegalArgumentException("only a JSON object can be signed");
    }
    byte[] mac = mac(body, keys.get(0));
    byte[] out = Arrays.copyOf(body, body.length - 1 + SUFFIX_LEN);
    int p = body.length - 1;
    System.arraycopy(HEAD, 0, out, p, HEAD.length);
    System.arraycopy(mac, 0, out, p + HEAD.length, mac.length);
    out[out.length - 2] = '"';
    out[out.length - 1] = '}';
    return out;
  }

  /** The unsigned body if {@code signed} carries a valid MAC under any key, else null. */
  public byte[] verify(byte[] signed) {
    int n = signed.length;
    if (n < SUFFIX_LEN + 2 || signed[n - 2] != '"' || signed[n - 1] != '}') {
      return null;
    }
    int start = n - SUFFIX_LEN;
    if (!Arrays.equals(signed, start, start + HEAD.length, HEAD, 0, HEAD.length)) {
      return null;
    }
    byte[] got = Arrays.copyOfRange(signed, start + HEAD.length, n - 2);
    for (byte b : got) {
      if (!((b >= '0' && b <= '9') || (b >= 'a' && b <= 'f'))) {
        return null;
      }
    }
    byte[] body = Arrays.copyOf(signed, start + 1);
    body[start] = '}';
    boolean ok = false;
    for (byte[] k : keys) { // every key, always: timing does not tell which matched
      ok |= MessageDigest.isEqual(mac(body, k), got);
    }
    return ok ? body : null;
  }
}
