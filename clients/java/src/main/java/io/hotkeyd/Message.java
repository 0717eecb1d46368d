package io.hotkeyd;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.List;

/**
 * One notification on the events channel, or one snapshot (a message with {@code full}).
 *
 * @param cool keys (with their db) that stopped being hot
 * @param skipped malformed entries left out by {@link #parse} (the rest applies)
 */
public record Message(
    String instance,
    long seq,
    double ts,
    List<HotEntry> hot,
    List<KeyId> cool,
    boolean full,
    boolean finalMsg,
    int skipped) {

  /**
   * Parse and validate a notification or snapshot; throws {@link WireException} on a bad
   * envelope ({@code v}, {@code instance}, {@code seq}, {@code ts}, {@code full}, {@code final},
   * the lists). A bad <i>entry</i> is left out and counted in {@link #skipped}.
   */
  public static Message parse(byte[] data) {
    JsonNode o = Wire.parse(data, "notification");
    JsonNode v = o.get("v");
    if (v == null || !v.isInt() || v.asInt() != Wire.VERSION) {
      throw new WireException(
          "unsupported wire version " + v + " (this client speaks " + Wire.VERSION + ")");
    }
    JsonNode instance = o.get("instance");
    if (instance == null || !instance.isTextual() || instance.asText().isEmpty()
        || instance.asText().length() > HotEntry.MAX_NAME) {
      throw new WireException("instance must be a non-empty string of at most 256 characters");
    }
    long seq = HotEntry.intField(o, "seq", 0, Wire.MAX_SEQ, null);
    double ts = HotEntry.numField(o, "ts", null);
    boolean full = flag(o, "full");
    boolean fin = flag(o, "final");
    JsonNode hotRaw = list(o, "hot");
    JsonNode coolRaw = list(o, "cool");
    list(o, "top");
    int skipped = 0;
    List<HotEntry> hot = new ArrayList<>();
    for (JsonNode h : hotRaw) {
      try {
        hot.add(HotEntry.fromJson(h));
      } catch (WireException e) {
        skipped++;
      }
    }
    List<KeyId> cool = new ArrayList<>();
    for (JsonNode c : coolRaw) {
      try {
        if (!c.isObject()) {
          throw new WireException("cool entry is not an object");
        }
        HotEntry.nameField(c, "rule", "");
        cool.add(new KeyId(Wire.decodeKey(c),
            (int) HotEntry.intField(c, "db", 0, Integer.MAX_VALUE, 0L)));
      } catch (WireException e) {
        skipped++;
      }
    }
    return new Message(instance.asText(), seq, ts, List.copyOf(hot), List.copyOf(cool), full,
        fin, skipped);
  }

  private static boolean flag(JsonNode o, String name) {
    JsonNode v = o.get(name);
    if (v == null) {
      return false;
    }
    if (!v.isBoolean()) {
      throw new WireException(name + " must be true or false");
    }
    return v.asBoolean();
  }

  private static JsonNode list(JsonNode o, String name) {
    JsonNode a = o.get(name);
    if (a == null) {
      return Wire.JSON.createArrayNode();
    }
    if (!a.isArray()) {
      throw new WireException("'" + name + "' is not a list");
    }
    return a;
  }

  /** This message as a full one (snapshots are full by definition). */
  Message asFull() {
    return full ? this : new Message(instance, seq, ts, hot, cool, true, finalMsg, skipped);
  }
}
