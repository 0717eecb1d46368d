package io.hotkeyd;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/**
 * One notification on the events channel, or one snapshot (a message with {@code full}).
 *
 * @param cool keys (with their db) that stopped being hot
 */
public record Message(
    String instance,
    long seq,
    double ts,
    List<HotEntry> hot,
    List<KeyId> cool,
    boolean full,
    boolean finalMsg) {

  /** Parse a notification or snapshot; throws {@link WireException} on anything malformed. */
  public static Message parse(byte[] data) {
    JsonNode o = Wire.parse(data, "notification");
    JsonNode v = o.get("v");
    if (v == null || !v.isInt() || v.asInt() != Wire.VERSION) {
      throw new WireException(
          "unsupported wire version " + v + " (this client speaks " + Wire.VERSION + ")");
    }
    JsonNode instance = o.get("instance");
    JsonNode seq = o.get("seq");
    JsonNode ts = o.get("ts");
    if (instance == null || !instance.isTextual() || seq == null || !seq.isIntegralNumber()
        || ts == null || !ts.isNumber()) {
      throw new WireException("bad notification: needs text instance, integer seq, numeric ts");
    }
    List<HotEntry> hot = new ArrayList<>();
    for (JsonNode h : array(o, "hot")) {
      hot.add(HotEntry.fromJson(h));
    }
    List<KeyId> cool = new ArrayList<>();
    for (JsonNode c : array(o, "cool")) {
      if (!c.isObject()) {
        throw new WireException("cool entry is not an object");
      }
      cool.add(new KeyId(Wire.decodeKey(c), HotEntry.intField(c, "db")));
    }
    return new Message(
        instance.asText(),
        seq.asLong(),
        ts.asDouble(),
        List.copyOf(hot),
        List.copyOf(cool),
        o.path("full").asBoolean(false),
        o.path("final").asBoolean(false));
  }

  private static Iterable<JsonNode> array(JsonNode o, String name) {
    JsonNode a = o.get(name);
    if (a == null || a.isNull()) {
      return List.of();
    }
    if (!a.isArray()) {
      throw new WireException("'" + name + "' is not a list");
    }
    return a;
  }

  /** This message as a full one (snapshots are full by definition). */
  Message asFull() {
    return full ? this : new Message(instance, seq, ts, hot, cool, true, finalMsg);
  }
}
