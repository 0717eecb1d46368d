package io.hotkeyd;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Demand reports (schema {@code demand-v1.json}): how many reads of each hot key an app served
 * locally in one interval, one message per daemon instance (the one that most recently
 * announced the key), so the daemon keeps seeing the demand the cache absorbs.
 */
public final class Demand {
  public static final int MAX_ENTRIES = Limits.DEMAND_ENTRIES_MAX;
  public static final long MAX_COUNT = Limits.COUNT_MAX;
  /** Largest message (bytes): receivers drop bigger ones whole, so long keys are left out. */
  public static final int MAX_BYTES = Limits.DEMAND_REPORT_BYTES_MAX;

  private Demand() {}

  /** One message to publish on {@code P:demand:<instance>}. */
  public record Report(String instance, long seq, byte[] payload, long reads, long dropped) {}

  /**
   * Encode one interval.
   *
   * @param reads per instance, the reads served locally per key (counts >= 1)
   * @return one report per instance with reads, sequence numbers from {@code firstSeq}
   */
  public static List<Report> encode(String app, long firstSeq, double ts, int intervalMs,
      Map<String, Map<KeyId, Long>> reads) {
    return encode(app, firstSeq, ts, intervalMs, reads, MAX_BYTES);
  }

  /** As {@link #encode(String, long, double, int, Map)}, each report at most maxBytes long. */
  public static List<Report> encode(String app, long firstSeq, double ts, int intervalMs,
      Map<String, Map<KeyId, Long>> reads, int maxBytes) {
    List<Report> out = new ArrayList<>();
    long seq = firstSeq;
    for (Map.Entry<String, Map<KeyId, Long>> inst : new TreeMap<>(reads).entrySet()) {
      List<Map.Entry<KeyId, Long>> entries = new ArrayList<>();
      for (Map.Entry<KeyId, Long> e : inst.getValue().entrySet()) {
        if (e.getValue() != null && e.getValue() > 0) {
          entries.add(e);
        }
      }
      if (entries.isEmpty()) {
        continue;
      }
      entries.sort((a, b) -> Long.compare(b.getValue(), a.getValue()));
      int keep = Math.min(entries.size(), MAX_ENTRIES);
      byte[] payload = payload(app, seq, ts, intervalMs, entries, keep);
      while (payload.length > maxBytes && keep > 1) { // long keys: halve, heaviest kept
        keep /= 2;
        payload = payload(app, seq, ts, intervalMs, entries, keep);
      }
      long dropped = 0;
      long sent = 0;
      for (int i = 0; i < entries.size(); i++) {
        long n = entries.get(i).getValue();
        long capped = i < keep ? Math.min(n, MAX_COUNT) : 0;
        dropped += n - capped;
        sent += capped;
      }
      out.add(new Report(inst.getKey(), seq, payload, sent, dropped));
      seq++;
    }
    return out;
  }

  private static byte[] payload(String app, long seq, double ts, int intervalMs,
      List<Map.Entry<KeyId, Long>> entries, int keep) {
    ObjectNode o = Wire.JSON.createObjectNode();
    o.put("v", 1);
    o.put("type", "demand");
    o.put("app", app);
    o.put("seq", seq);
    o.put("ts", java.math.BigDecimal.valueOf(ts).setScale(3, java.math.RoundingMode.HALF_EVEN));
    o.put("interval_ms", intervalMs);
    ArrayNode arr = o.putArray("entries");
    for (int i = 0; i < keep; i++) {
      KeyId id = entries.get(i).getKey();
      ObjectNode e = Wire.encodeKey(id.key(), arr.addObject());
      if (id.db() != 0) {
        e.put("db", id.db());
      }
      e.put("n", Math.min(entries.get(i).getValue(), MAX_COUNT));
    }
    return Wire.dumps(o);
  }
}
