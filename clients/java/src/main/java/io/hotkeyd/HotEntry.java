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

  static HotEntry fromJson(JsonNode o) {
    if (o == null || !o.isObject()) {
      throw new WireException("hot entry is not an object");
    }
    byte[] key = Wire.decodeKey(o);
    JsonNode rate = o.get("rate");
    JsonNode rule = o.get("rule");
    JsonNode ttl = o.get("ttl_ms");
    if (rate == null || !rate.isNumber() || rule == null || !rule.isTextual() || ttl == null
        || !ttl.isNumber()) {
      throw new WireException("bad hot entry " + o + ": needs numeric rate and ttl_ms, text rule");
    }
    JsonNode kind = o.get("kind");
    return new HotEntry(
        new KeyId(key, intField(o, "db")),
        rate.asDouble(),
        rule.asText(),
        ttl.asLong(),
        o.path("since").asDouble(0.0),
        kind == null || kind.isNull() ? null : kind.asText());
  }

  static int intField(JsonNode o, String name) {
    JsonNode v = o.get(name);
    if (v == null || v.isNull()) {
      return 0;
    }
    if (!v.canConvertToInt() || !v.isIntegralNumber()) {
      throw new WireException("'" + name + "' must be an integer, got " + v);
    }
    return v.asInt();
  }
}
