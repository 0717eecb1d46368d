package io.hotkeyd;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;

/**
 * Invalidation payloads on {@code P:invalidate} (schema {@code invalidation-v1.json}): every
 * cache drops its copies of the listed keys, in every db, whether or not it thinks they are
 * hot.
 */
public final class Invalidation {
  private Invalidation() {}

  /** A decoded payload: who wrote, and the keys to drop. */
  public record Payload(String origin, List<byte[]> keys) {}

  public static byte[] encode(String origin, List<byte[]> keys) {
    ObjectNode o = Wire.JSON.createObjectNode();
    o.put("v", 1);
    o.put("origin", origin);
    ArrayNode arr = o.putArray("keys");
    for (byte[] k : keys) {
      arr.add(Wire.encodeKey(k));
    }
    return Wire.dumps(o);
  }

  /** Parse a payload; throws {@link WireException} when malformed. */
  public static Payload decode(byte[] payload) {
    JsonNode o = Wire.parse(payload, "invalidation");
    JsonNode v = o.get("v");
    JsonNode keys = o.get("keys");
    if (v == null || !v.isInt() || v.asInt() != 1 || keys == null || !keys.isArray()) {
      throw new WireException("invalidation is not a v1 object with a 'keys' list");
    }
    List<byte[]> out = new ArrayList<>(keys.size());
    for (JsonNode k : keys) {
      if (!k.isObject()) {
        throw new WireException("bad key entry " + k);
      }
      out.add(Wire.decodeKey(k));
    }
    JsonNode origin = o.get("origin");
    return new Payload(origin == null || origin.isNull() ? "" : origin.asText(), out);
  }
}
