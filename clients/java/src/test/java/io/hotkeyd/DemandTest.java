package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Demand reports stay under the receivers' byte bound however long the keys are. */
class DemandTest {
  @Test
  void longKeysAreLeftOutHeaviestKeptSoTheMessageIsNeverDroppedWhole() throws Exception {
    Map<KeyId, Long> reads = new HashMap<>();
    for (int i = 0; i < 1000; i++) { // 1,000 binary keys of 1 KiB: ~1.4 MB as base64
      byte[] key = new byte[1024];
      Arrays.fill(key, (byte) 0xff);
      key[0] = (byte) (i >> 8);
      key[1] = (byte) i;
      reads.put(new KeyId(key, 0), 10_000L + i);
    }
    List<Demand.Report> out = Demand.encode("app", 1, 0.0, 250, Map.of("d1", reads));
    assertEquals(1, out.size());
    Demand.Report r = out.get(0);
    assertTrue(r.payload().length <= Demand.MAX_BYTES, "payload " + r.payload().length);
    JsonNode entries = new ObjectMapper().readTree(r.payload()).get("entries");
    assertTrue(entries.size() >= 50 && entries.size() < 1000, "entries " + entries.size()); // ~90 fit in 128 KiB
    long total = reads.values().stream().mapToLong(Long::longValue).sum();
    assertEquals(total, r.reads() + r.dropped());
    long min = Long.MAX_VALUE;
    long sent = 0;
    for (JsonNode e : entries) {
      min = Math.min(min, e.get("n").asLong());
      sent += e.get("n").asLong();
    }
    assertEquals(sent, r.reads());
    assertEquals(10_000L + 1000 - entries.size(), min); // the heaviest were kept
  }
}
