package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/**
 * spec/vectors/watch.json through the objects a HotCache feeds every heartbeat and
 * invalidation through (Watch.Leases, Watch.Intake).
 */
class WatchVectorsTest {
  static final JsonNode V = load();
  static final long MS = 1_000_000L;

  static JsonNode load() {
    try {
      return ConformanceTest.load("watch.json");
    } catch (java.io.IOException e) {
      throw new java.io.UncheckedIOException(e);
    }
  }

  static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void decode() {
    assertEquals(V.get("lease_ms").asLong() * MS, Watch.LEASE_NANOS);
    double now = V.get("now_s").asDouble();
    for (JsonNode c : V.get("decode")) {
      String name = c.get("name").asText();
      if (!c.get("ok").asBoolean()) {
        assertThrows(WireException.class, () -> Watch.decode(utf8(c.get("payload").asText()), now), name);
        continue;
      }
      Watch.Heartbeat hb = Watch.decode(utf8(c.get("payload").asText()), now);
      JsonNode w = c.get("heartbeat");
      assertEquals(w.get("instance").asText() + "|" + w.get("node").asText() + "|" + w.get("epoch").asLong()
          + "|" + w.get("up").asBoolean() + "|" + w.get("armed").asLong(),
          hb.instance() + "|" + hb.node() + "|" + hb.epoch() + "|" + hb.up() + "|" + hb.armed(), name);
      String slots = hb.slots() == null ? "null" : Arrays.deepToString(hb.slots()).replace(" ", "");
      assertEquals(w.get("slots").toString(), slots, name);
    }
  }

  @Test
  void leases() {
    double nowS = V.get("now_s").asDouble();
    for (JsonNode c : V.get("leases")) {
      String name = c.get("name").asText();
      Watch.Leases w = new Watch.Leases(Watch.LEASE_NANOS);
      Watch.Guard g = null;
      for (JsonNode st : c.get("steps")) {
        long now = st.get("at_ms").asLong() * MS;
        String at = name + " at " + st.get("at_ms");
        if (st.has("heartbeat")) {
          ObjectNode body = ((ObjectNode) st.get("heartbeat").deepCopy()).put("v", 1).put("ts", nowS);
          Watch.Heartbeat hb = Watch.decode(utf8(body.toString()), nowS);
          assertEquals(st.get("epoch_changed").asBoolean(), w.heard(hb, now), at);
        } else if (st.has("guard")) {
          List<Map.Entry<String, Long>> hot = new ArrayList<>();
          for (JsonNode h : st.get("guard").get("hot")) {
            hot.add(Map.entry(h.get(0).asText(), h.get(1).asLong()));
          }
          g = w.guard(st.get("guard").get("slot").asInt(), hot, now);
          JsonNode e = st.get("expect");
          if (e.isNull()) {
            assertNull(g, at);
          } else {
            List<Map.Entry<String, Long>> nodes = new ArrayList<>();
            for (JsonNode n : e.get(1)) {
              nodes.add(Map.entry(n.get(0).asText(), n.get(1).asLong()));
            }
            assertEquals(new Watch.Guard(e.get(0).asText(), nodes), g, at);
          }
        } else if (st.has("serve")) {
          assertEquals(st.get("expect").asBoolean(), w.serves(g, st.get("serve").get("slot").asInt(), now), at);
        } else if (st.has("forget")) {
          w.forget();
        }
      }
    }
  }

  static byte[] gen(JsonNode g) {
    if (g.has("bytes")) {
      String head = "{\"v\":1,\"origin\":\"";
      String tail = "\",\"keys\":[{\"key\":\"x\"}]}";
      return utf8(head + "o".repeat(g.get("bytes").asInt() - head.length() - tail.length()) + tail);
    }
    StringBuilder sb = new StringBuilder("{\"v\":1,\"origin\":\"o\",\"keys\":[");
    for (int i = 0; i < g.get("keys").asInt(); i++) {
      sb.append(i == 0 ? "" : ",").append("{\"key\":\"k").append(i).append("\"}");
    }
    return utf8(sb.append("]}").toString());
  }

  @Test
  void intake() throws Exception {
    byte[] key = utf8(ConformanceTest.load("auth.json").get("key_utf8").asText());
    for (JsonNode c : V.get("intake")) {
      String name = c.get("name").asText();
      Watch.Intake in = new Watch.Intake(
          c.get("auth").asBoolean() ? new MessageAuth(List.of(key)) : null, Watch.KEY_INTERVAL_NANOS);
      byte[] payload = c.has("gen") ? gen(c.get("gen")) : utf8(c.get("payload").asText());
      List<byte[]> got = in.receive(payload, 0);
      Map<String, Long> counts = Map.of("oversized", in.oversized.get(), "unsigned", in.unsigned.get(), "bad", in.bad.get());
      if (c.get("outcome").asText().equals("applied")) {
        assertNotNull(got, name);
        if (c.has("drops_count")) {
          assertEquals(c.get("drops_count").asInt(), got.size(), name);
        } else {
          List<String> want = new ArrayList<>();
          c.get("drops").forEach(d -> want.add(d.asText()));
          List<String> have = new ArrayList<>();
          got.forEach(k -> have.add(new String(k, StandardCharsets.UTF_8)));
          assertEquals(want, have, name);
        }
      } else {
        assertNull(got, name);
        assertEquals(1L, counts.get(c.get("outcome").asText()), name);
      }
    }
  }

  @Test
  void ratelimit() {
    byte[] inval = utf8("{\"v\":1,\"origin\":\"o\",\"keys\":[{\"key\":\"k\"}]}");
    KeyId k = new KeyId(utf8("k"), 0);
    for (JsonNode c : V.get("ratelimit")) {
      Watch.Intake in = new Watch.Intake(null, Watch.KEY_INTERVAL_NANOS);
      List<Long> applied = new ArrayList<>();
      for (JsonNode e : c.get("events")) {
        long ms = e.get(1).asLong();
        if (e.get(0).asText().equals("inval")) {
          List<byte[]> got = in.receive(inval, ms * MS);
          if (got != null && got.size() == 1) {
            applied.add(ms);
          }
        } else if (in.due(k, ms * MS)) {
          applied.add(ms);
        }
      }
      List<Long> want = new ArrayList<>();
      c.get("applied_ms").forEach(x -> want.add(x.asLong()));
      assertEquals(want, applied, c.get("name").asText());
    }
  }
}
