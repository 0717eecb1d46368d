package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;

/** The shared conformance vectors (spec/vectors, described in spec/README.md). */
class ConformanceTest {
  static final ObjectMapper JSON = new ObjectMapper();
  static final HexFormat HEX = HexFormat.of();

  static JsonNode load(String name) throws IOException {
    Path dir = Path.of(System.getProperty("hotkeyd.spec", "../../spec"), "vectors");
    return JSON.readTree(Files.readAllBytes(dir.resolve(name)));
  }

  static KeyId ident(JsonNode e) {
    return new KeyId(Wire.decodeKey(e), e.path("db").asInt(0));
  }

  static List<String> sortedKeys(Iterable<byte[]> keys) {
    List<String> out = new ArrayList<>();
    keys.forEach(k -> out.add(HEX.formatHex(k)));
    out.sort(null);
    return out;
  }

  // ------------------------------------------------------------------ hot set

  /**
   * A SubscriberCore and HotSet on a manual clock, driven through the subscriber's own
   * handler ({@link SubscriberCore#onEventMessage}, what a live subscription calls for each
   * message) and bootstrap; {@code store} plays Redis' snapshots.
   */
  static final class Driver {
    final ManualClock clock;
    final SubscriberCore core;
    final Map<String, byte[]> store = new LinkedHashMap<>();
    final List<byte[]> hot = new ArrayList<>();
    final List<byte[]> cooled = new ArrayList<>();

    Driver(long startMs, double nowS) {
      clock = new ManualClock(startMs * 1_000_000L, (long) (nowS * 1000));
      HotSet hs = new HotSet(clock);
      hs.addListener(new HotListener() {
        @Override
        public void onHot(HotEntry e) {
          hot.add(e.key());
        }

        @Override
        public void onCool(KeyId k) {
          cooled.add(k.key());
        }
      });
      SubscriberCore.SnapshotStore snapshots = new SubscriberCore.SnapshotStore() {
        @Override
        public List<String> live(double sinceSeconds) {
          return new ArrayList<>(new java.util.TreeSet<>(store.keySet()));
        }

        @Override
        public List<byte[]> get(List<String> ids) {
          List<byte[]> out = new ArrayList<>();
          ids.forEach(id -> out.add(store.get(id)));
          return out;
        }
      };
      core = new SubscriberCore(hs, Namespace.DEFAULT, snapshots, Limits.INSTANCE_MAX_AGE_S);
    }

    String step(JsonNode step) throws IOException {
      String op = step.get("op").asText();
      switch (op) {
        case "snapshot" -> {
          store.put(step.get("data").get("instance").asText(), JSON.writeValueAsBytes(step.get("data")));
          return null;
        }
        case "bootstrap" -> {
          core.onSubscribed();
          core.applySnapshots(core.readSnapshots(null));
          return null;
        }
        case "advance" -> {
          clock.advanceMillis(step.get("ms").asLong());
          core.hotset().expire();
          return null;
        }
        case "message" -> {
          byte[] raw = step.has("raw")
              ? step.get("raw").asText().getBytes(StandardCharsets.UTF_8)
              : JSON.writeValueAsBytes(step.get("data"));
          int padTo = step.path("pad_to").asInt(0);
          if (padTo > raw.length) {
            byte[] padded = Arrays.copyOf(raw, padTo);
            Arrays.fill(padded, raw.length, padTo, (byte) ' ');
            raw = padded;
          }
          SubscriberStats st = core.stats();
          long bad = st.badMessages.get();
          long suspect = st.suspect.get();
          long resyncs = st.resyncs.get();
          long applied = st.applied.get();
          long stale = st.stale.get();
          core.onEventMessage(raw);
          if (st.badMessages.get() > bad) {
            return "bad";
          } else if (st.suspect.get() > suspect) {
            return "suspect";
          } else if (st.resyncs.get() > resyncs) {
            return "resynced";
          } else if (st.applied.get() > applied) {
            return "applied";
          }
          return st.stale.get() > stale ? "stale" : "";
        }
        default -> throw new AssertionError("unknown op " + op);
      }
    }

    Set<KeyId> hotNow() {
      return new HashSet<>(core.hotset().keys());
    }
  }

  /** Run one case of a file in the hotset.json format; an AssertionError names the step. */
  static void runHotSetCase(long start, double nowS, JsonNode c) throws IOException {
    Driver d = new Driver(start, nowS);
    int i = 0;
    for (JsonNode step : c.get("steps")) {
      d.hot.clear();
      d.cooled.clear();
      String where = c.get("name").asText() + " step " + i++ + " (" + step.get("op") + ")";
      long skipped = d.core.stats().badEntries.get();
      String outcome = d.step(step);
      assertEquals(step.path("skipped").asLong(0), d.core.stats().badEntries.get() - skipped, where);
      if (step.has("outcome")) {
        assertEquals(step.get("outcome").asText(), outcome, where);
      }
      if (step.has("hot")) {
        Set<KeyId> want = new HashSet<>();
        step.get("hot").forEach(e -> want.add(ident(e)));
        assertEquals(want, d.hotNow(), where);
      }
      if (step.has("became_hot")) {
        List<byte[]> want = new ArrayList<>();
        step.get("became_hot").forEach(e -> want.add(Wire.decodeKey(e)));
        assertEquals(sortedKeys(want), sortedKeys(d.hot), where);
      }
      if (step.has("cooled")) {
        List<byte[]> want = new ArrayList<>();
        step.get("cooled").forEach(e -> want.add(Wire.decodeKey(e)));
        assertEquals(sortedKeys(want), sortedKeys(d.cooled), where);
      }
    }
  }

  /** Every case of {@code file} (hotset.json format), one dynamic test each. */
  static Stream<DynamicTest> hotSetVectors(String file) throws IOException {
    JsonNode doc = load(file);
    long start = doc.get("start_ms").asLong();
    double nowS = doc.path("now_s").asDouble(1_700_000_000.0);
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : doc.get("cases")) {
      if (c.path("skip").has("java")) {
        continue;
      }
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> runHotSetCase(start, nowS, c)));
    }
    assertTrue(!tests.isEmpty(), "no vectors in " + file);
    return tests.stream();
  }

  /** The whole file at once (for a test that runs this runner on a changed copy). */
  static void runHotSetVectors(String file) throws Throwable {
    for (DynamicTest t : (Iterable<DynamicTest>) hotSetVectors(file)::iterator) {
      t.getExecutable().execute();
    }
  }

  @TestFactory
  Stream<DynamicTest> hotset() throws IOException {
    return hotSetVectors("hotset.json");
  }

  @TestFactory
  Stream<DynamicTest> limits() throws IOException {
    return hotSetVectors("limits.json");
  }

  @Test
  void authKeyLength() throws IOException {
    for (JsonNode c : load("limits.json").get("auth")) {
      byte[] key = c.get("key_utf8").asText().getBytes(StandardCharsets.UTF_8);
      if (c.get("error").asBoolean()) {
        assertThrows(HotkeydException.class, () -> new MessageAuth(List.of(key)), c.toString());
      } else {
        new MessageAuth(List.of(key));
      }
    }
  }

  @Test
  void namespaceNames() throws IOException {
    JsonNode cases = load("namespace.json").get("cases");
    assertTrue(cases.size() > 0);
    for (JsonNode c : cases) {
      String ch = c.hasNonNull("channel") ? c.get("channel").asText() : null;
      Namespace ns = new Namespace(c.path("prefix").asText("hotkeyd"), ch);
      String inst = c.get("instance").asText();
      JsonNode want = c.get("names");
      String name = c.get("name").asText();
      assertEquals(want.get("events").asText(), ns.channel(), name);
      assertEquals(want.get("invalidate").asText(), ns.invalidateChannel(), name);
      assertEquals(want.get("demand").asText(), ns.demandChannel(inst), name);
      assertEquals(want.get("instances").asText(), ns.instances(), name);
      assertEquals(want.get("snapshot").asText(), ns.snapshot(inst), name);
    }
  }

  // ------------------------------------------------------------------- keys

  static Object nativeKey(JsonNode input) {
    JsonNode v = input.get("value");
    return switch (input.get("type").asText()) {
      case "str" -> v.asText();
      case "int" -> v.canConvertToLong() ? (Object) v.asLong() : (Object) new BigInteger(v.asText());
      case "float" -> v.asDouble();
      case "bytes" -> HEX.parseHex(input.get("hex").asText());
      case "bool" -> v.asBoolean();
      case "null" -> null;
      case "list" -> List.of(v.toString());
      default -> throw new AssertionError(input.toString());
    };
  }

  @TestFactory
  Stream<DynamicTest> keyEncoding() throws IOException {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : load("keys.json").get("encode")) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> {
        Object key = nativeKey(c.get("input"));
        if (c.has("error")) {
          assertThrows(IllegalArgumentException.class, () -> Keys.toBytes(key));
          return;
        }
        byte[] kb = Keys.toBytes(key);
        assertEquals(c.get("bytes_hex").asText(), HEX.formatHex(kb));
        assertEquals(c.get("wire"), Wire.encodeKey(kb));
        assertArrayEquals(kb, Wire.decodeKey(c.get("wire")));
      }));
    }
    for (JsonNode c : load("keys.json").get("decode")) {
      tests.add(DynamicTest.dynamicTest("decode: " + c.get("name").asText(), () -> {
        if (c.path("error").asBoolean(false)) {
          assertThrows(WireException.class, () -> Wire.decodeKey(c.get("wire")));
        } else {
          assertEquals(c.get("bytes_hex").asText(), HEX.formatHex(Wire.decodeKey(c.get("wire"))));
        }
      }));
    }
    return tests.stream();
  }

  // ------------------------------------------------------------- partitions

  @Test
  void reporterPartitionAndShardChoice() throws IOException {
    JsonNode doc = load("partition.json");
    for (JsonNode c : doc.get("reporter").get("cases")) {
      byte[] key = Wire.decodeKey(c);
      assertEquals(c.get("murmur3").asLong(), Murmur3.hash32(key, 0), c.toString());
      for (Iterator<Map.Entry<String, JsonNode>> it = c.get("partition").fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> p = it.next();
        assertEquals(p.getValue().asInt(), Murmur3.partition(key, Integer.parseInt(p.getKey())));
      }
    }
    for (JsonNode c : doc.get("sharded").get("cases")) {
      byte[] key = Wire.decodeKey(c);
      assertEquals(c.get("murmur3").asLong(), Murmur3.hash32(key, ShardedCounter.SEED));
      for (Iterator<Map.Entry<String, JsonNode>> it = c.get("shard").fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> p = it.next();
        assertEquals(p.getValue().asInt(),
            ShardedCounter.shardOf(key, Integer.parseInt(p.getKey())));
      }
    }
  }

  // ----------------------------------------------------------- invalidation

  @TestFactory
  Stream<DynamicTest> invalidation() throws IOException {
    JsonNode doc = load("invalidation.json");
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : doc.get("decode")) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> {
        byte[] payload = c.get("payload").asText().getBytes(StandardCharsets.UTF_8);
        if (c.path("error").asBoolean(false)) {
          assertThrows(WireException.class, () -> Invalidation.decode(payload));
          return;
        }
        Invalidation.Payload p = Invalidation.decode(payload);
        assertEquals(c.get("origin").asText(), p.origin());
        List<String> want = new ArrayList<>();
        c.get("drops").forEach(e -> want.add(HEX.formatHex(Wire.decodeKey(e))));
        List<String> got = new ArrayList<>();
        p.keys().forEach(k -> got.add(HEX.formatHex(k)));
        assertEquals(want, got);
      }));
    }
    for (JsonNode c : doc.get("encode")) {
      tests.add(DynamicTest.dynamicTest("encode: " + c.get("name").asText(), () -> {
        List<byte[]> keys = new ArrayList<>();
        c.get("keys_hex").forEach(h -> keys.add(HEX.parseHex(h.asText())));
        assertEquals(c.get("json"), JSON.readTree(Invalidation.encode(c.get("origin").asText(), keys)));
      }));
    }
    return tests.stream();
  }

  // ----------------------------------------------------------------- demand

  @TestFactory
  Stream<DynamicTest> demand() throws IOException {
    List<DynamicTest> tests = new ArrayList<>();
    for (JsonNode c : load("demand.json").get("cases")) {
      tests.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> {
        Map<String, Map<KeyId, Long>> reads = new HashMap<>();
        for (JsonNode r : c.get("reads")) {
          KeyId id = new KeyId(HEX.parseHex(r.get("key_hex").asText()), r.get("db").asInt());
          reads.computeIfAbsent(r.get("instance").asText(), k -> new HashMap<>())
              .merge(id, r.get("n").asLong(), Long::sum);
        }
        List<Demand.Report> out = Demand.encode(c.get("app").asText(), c.get("seq").asLong(),
            c.get("ts").asDouble(), c.get("interval_ms").asInt(), reads);
        JsonNode want = c.get("messages");
        assertEquals(want.size(), out.size());
        List<Long> seqs = new ArrayList<>();
        for (Demand.Report r : out) {
          JsonNode got = JSON.readTree(r.payload());
          JsonNode exp = want.get(r.instance());
          assertTrue(exp != null, "unexpected message for " + r.instance());
          seqs.add(got.get("seq").asLong());
          for (String f : List.of("v", "type", "app", "interval_ms")) {
            assertEquals(exp.get(f), got.get(f), f);
          }
          assertEquals(exp.get("ts").asDouble(), got.get("ts").asDouble(), 1e-6);
          Map<KeyId, Long> wantEntries = new HashMap<>();
          exp.get("entries").forEach(e -> wantEntries.put(ident(e), e.get("n").asLong()));
          Map<KeyId, Long> gotEntries = new HashMap<>();
          got.get("entries").forEach(e -> {
            gotEntries.put(ident(e), e.get("n").asLong());
            assertEquals(Wire.encodeKey(Wire.decodeKey(e)).get("key"), e.get("key"));
            assertTrue(!e.has("db") || e.get("db").asInt() != 0, "db 0 must be omitted");
          });
          assertEquals(wantEntries, gotEntries);
          assertEquals(c.get("dropped").get(r.instance()).asLong(), r.dropped());
        }
        seqs.sort(null);
        List<Long> wantSeqs = new ArrayList<>();
        c.get("seqs").forEach(s -> wantSeqs.add(s.asLong()));
        assertEquals(wantSeqs, seqs);
      }));
    }
    return tests.stream();
  }

  @TestFactory
  List<DynamicTest> hostile() throws IOException {
    JsonNode v = load("hostile.json");
    assertEquals(Wire.MAX_DEPTH, v.get("max_depth").asInt());
    assertEquals(Wire.MAX_SEQ, v.get("max_seq").asLong());
    List<DynamicTest> out = new ArrayList<>();
    for (JsonNode c : v.get("cases")) {
      String decoder = c.get("decoder").asText();
      if (decoder.equals("demand")) {
        continue; // the Java client sends demand reports, it does not read them
      }
      byte[] data;
      if (c.has("input_base64")) {
        data = java.util.Base64.getDecoder().decode(c.get("input_base64").asText());
      } else if (c.has("gen")) {
        JsonNode g = c.get("gen");
        int n = g.get("times").asInt();
        data = (g.get("prefix").asText() + g.get("open").asText().repeat(n)
                + g.get("close").asText().repeat(n) + g.get("suffix").asText())
            .getBytes(java.nio.charset.StandardCharsets.UTF_8);
      } else {
        data = c.get("input").asText().getBytes(java.nio.charset.StandardCharsets.UTF_8);
      }
      boolean valid = c.get("valid").asBoolean();
      out.add(DynamicTest.dynamicTest(c.get("name").asText(), () -> {
        Runnable decode = decoder.equals("notification")
            ? () -> Message.parse(data) : () -> Invalidation.decode(data);
        if (valid) {
          decode.run();
        } else {
          assertThrows(WireException.class, decode::run);
        }
      }));
    }
    return out;
  }
}
