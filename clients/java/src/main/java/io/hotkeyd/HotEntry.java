package io.hotkeyd;

import com.fasterxml.jackson.databind.JsonNode;

/** A key that is hot (or still hot, when re-announced). */
public record HotEntry(
    KeyId id, double rate, String rule, long ttlMs, double since, String kind) {

  public byte[] key() {
    return id.key();
  }

  public int db() {
    return id.db();
  }

  static final long MAX_TTL_MS = Limits.TTL_MS_MAX;
  static final int MAX_NAME = Limits.NAME_CHARS_MAX;

  /** Validate and build an entry; {@link WireException} on anything off the format. */
  static HotEntry fromJson(JsonNode o) {
    if (o == null || !o.isObject()) {
      throw new WireException("hot entry is not an object");
    }
    JsonNode kind = o.get("kind");
    String k = null;
    if (kind != null && !kind.isNull()) {
      k = kind.isTextual() ? kind.asText() : "";
      if (!k.equals("read") && !k.equals("write") && !k.equals("mixed")) {
        throw new WireException("kind must be read, write or mixed, got " + kind);
      }
    }
    byte[] key = Wire.decodeKey(o);
    return new HotEntry(
        new KeyId(key, (int) intField(o, "db", 0, Limits.DB_MAX, 0L)),
        numField(o, "rate", null),
        nameField(o, "rule", null),
        intField(o, "ttl_ms", 0, MAX_TTL_MS, null),
        numField(o, "since", 0.0),
        k);
  }

  /** An integer in [lo, hi] (no floats, no booleans); {@code dflt} when absent (null: required). */
  static long intField(JsonNode o, String name, long lo, long hi, Long dflt) {
    JsonNode v = o.get(name);
    if (v == null && dflt != null) {
      return dflt;
    }
    if (v == null || !v.isIntegralNumber() || !v.canConvertToLong()
        || v.asLong() < lo || v.asLong() > hi) {
      throw new WireException(name + " must be an integer in [" + lo + ", " + hi + "], got " + v);
    }
    return v.asLong();
  }

  /** A finite number >= 0; {@code dflt} when absent (null: required). */
  static double numField(JsonNode o, String name, Double dflt) {
    JsonNode v = o.get(name);
    if (v == null && dflt != null) {
      return dflt;
    }
    if (v == null || !v.isNumber() || !Double.isFinite(v.asDouble()) || v.asDouble() < 0) {
      throw new WireException(name + " must be a finite number >= 0, got " + v);
    }
    return v.asDouble();
  }

  /** A string of at most 256 characters; {@code dflt} when absent (null: required). */
  static String nameField(JsonNode o, String name, String dflt) {
    JsonNode v = o.get(name);
    if (v == null && dflt != null) {
      return dflt;
    }
    if (v == null || !v.isTextual() || v.asText().length() > MAX_NAME) {
      throw new WireException(name + " must be a string of at most " + MAX_NAME + " characters");
    }
    return v.asText();
  }
}
