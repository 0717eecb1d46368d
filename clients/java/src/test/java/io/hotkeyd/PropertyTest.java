package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import net.jqwik.api.Arbitraries;
import net.jqwik.api.Arbitrary;
import net.jqwik.api.Example;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.Provide;
import net.jqwik.api.constraints.Size;

/**
 * Property tests of the decoders (issue 23): whatever the bytes, {@link Message#parse} and
 * {@link Invalidation#decode} return a value or throw {@link WireException} (never another
 * exception), what they accept is well formed, keys round-trip, and demand reports stay
 * within their size cap. spec/fuzz/wire.json is replayed first; jqwik's fixed seed keeps CI
 * deterministic ({@code -Djqwik.seeds.whenfixed=ALLOW_ONLY} and a seed explore more).
 */
class PropertyTest {
  static void message(byte[] data) {
    Message m;
    try {
      m = Message.parse(data);
    } catch (WireException e) {
      return;
    }
    assertTrue(!m.instance().isEmpty() && m.seq() >= 0 && m.seq() <= Wire.MAX_SEQ, m.toString());
    assertTrue(Double.isFinite(m.ts()), m.toString());
    for (HotEntry h : m.hot()) {
      assertTrue(h.ttlMs() >= 0 && Double.isFinite(h.rate()), h.toString());
    }
  }

  static void invalidation(byte[] data) {
    Invalidation.Payload p;
    try {
      p = Invalidation.decode(data);
    } catch (WireException e) {
      return;
    }
    for (byte[] k : p.keys()) {
      assertArrayEquals(k, Wire.decodeKey(Wire.encodeKey(k)));
    }
  }

  @Example
  void theCorpusReplaysThroughEveryDecoder() throws Exception {
    Path p = Path.of(System.getProperty("hotkeyd.spec", "../../spec"), "fuzz", "wire.json");
    JsonNode inputs = Wire.JSON.readTree(Files.readAllBytes(p)).get("inputs");
    assertTrue(inputs.size() > 0);
    for (JsonNode in : inputs) {
      byte[] data = Base64.getDecoder().decode(in.asText());
      message(data);
      invalidation(data);
    }
  }

  @Property(tries = 500, seed = "23")
  void anyBytesAreAMessageOrAWireError(@ForAll @Size(max = 512) byte[] data) {
    message(data);
    invalidation(data);
  }

  @Provide
  Arbitrary<String> nearMessages() {
    Arbitrary<String> num = Arbitraries.oneOf(
        Arbitraries.longs().map(String::valueOf),
        Arbitraries.doubles().map(String::valueOf),
        Arbitraries.strings().numeric().ofMinLength(1).ofMaxLength(500),
        Arbitraries.of("1e400", "-1e400", "NaN", "Infinity", "-0", "1.0", "true", "null", "\"1\""));
    Arbitrary<String> text = Arbitraries.strings().ofMaxLength(20)
        .map(s -> Wire.JSON.valueToTree(s).toString());
    return Arbitraries.of(
            "{\"v\":%s,\"instance\":%s,\"seq\":%s,\"ts\":%s,\"hot\":[],\"cool\":[]}",
            "{\"v\":1,\"instance\":%2$s,\"seq\":%3$s,\"ts\":%4$s,\"hot\":[{\"key\":%2$s,\"rate\":%1$s,\"rule\":\"r\",\"ttl_ms\":%3$s}],\"cool\":[]}")
        .flatMap(fmt -> num.list().ofSize(4).flatMap(n -> text.map(t ->
            String.format(fmt, n.get(0), t, n.get(2), n.get(3)))));
  }

  @Property(tries = 500, seed = "23")
  void nearValidMessagesAreWellFormedOrAWireError(@ForAll("nearMessages") String doc) {
    message(doc.getBytes(StandardCharsets.UTF_8));
  }

  @Property(tries = 100, seed = "23")
  void demandReportsStayWithinTheirCap(
      @ForAll @Size(max = 40) List<@Size(max = 300) byte[]> keys, @ForAll String app) {
    Map<KeyId, Long> reads = new java.util.HashMap<>();
    long n = 1;
    for (byte[] k : keys) {
      reads.merge(new KeyId(k, 0), n, Long::sum);
      n = n * 7 + 1;
    }
    if (reads.isEmpty()) {
      return;
    }
    List<Demand.Report> out = new ArrayList<>(Demand.encode(app.isEmpty() ? "a" : app, 1,
        1764480000.25, 250, Map.of("d1", reads)));
    for (Demand.Report r : out) {
      assertTrue(r.payload().length <= Demand.MAX_BYTES, "payload " + r.payload().length);
      JsonNode doc = Wire.parse(r.payload(), "demand report");
      for (JsonNode e : doc.get("entries")) {
        long c = e.get("n").asLong();
        assertTrue(c >= 1 && c <= Demand.MAX_COUNT, String.valueOf(c));
      }
    }
  }
}
