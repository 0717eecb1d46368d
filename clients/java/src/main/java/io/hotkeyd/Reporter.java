package io.hotkeyd;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Apps count their own key accesses and ship aggregates to Kafka for the daemon ({@code
 * format=reporter}). {@link #record} is a map increment under a short lock; every 100 ms a
 * background thread swaps the map and sends one message per target partition: {@code
 * key<TAB>count} lines, or a JSON batch for keys that cannot travel as lines (empty, starting
 * with '{', containing TAB/CR/LF). Each key goes to partition {@code murmur3(key, 0) mod
 * partitions}, exactly like the Python reporter, so all accesses of one key from every app, in
 * every language, are counted by one daemon.
 */
public final class Reporter implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(Reporter.class);
  static final long MAX_COUNT = 0xffffffffL;

  private final Producer<byte[], byte[]> producer;
  private final String topic;
  private final int maxKeys;
  private final int maxMessageBytes;
  private final Object lock = new Object();
  private Map<KeyId, long[]> buf = new HashMap<>();
  private final ScheduledExecutorService timer;
  private volatile boolean closed;
  /** Accesses dropped: buffer full, or a count over 2^32-1. */
  public final LongAdder dropped = new LongAdder();
  public final LongAdder accessesSent = new LongAdder();
  public final LongAdder messagesSent = new LongAdder();
  public final LongAdder sendErrors = new LongAdder();

  /** A reporter to {@code bootstrap} (host:port list); extra producer settings optional. */
  public Reporter(String bootstrap, String topic, Properties extra) {
    this(newProducer(bootstrap, extra), topic, Duration.ofMillis(100), 100_000, 256 * 1024);
  }

  public Reporter(String bootstrap, String topic) {
    this(bootstrap, topic, new Properties());
  }

  /** With a producer you built (security settings, tests). */
  public Reporter(Producer<byte[], byte[]> producer, String topic, Duration flushInterval,
      int maxKeys, int maxMessageBytes) {
    if (flushInterval.isNegative() || flushInterval.isZero()) {
      throw new IllegalArgumentException("flush interval must be > 0");
    }
    this.producer = producer;
    this.topic = topic;
    this.maxKeys = maxKeys;
    this.maxMessageBytes = maxMessageBytes;
    this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "hotkeyd-reporter");
      t.setDaemon(true);
      return t;
    });
    long ms = flushInterval.toMillis();
    timer.scheduleAtFixedRate(this::flushSafely, ms, ms, TimeUnit.MILLISECONDS);
  }

  private static Producer<byte[], byte[]> newProducer(String bootstrap, Properties extra) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "hotkeyd-reporter");
    p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 2000);
    p.put(ProducerConfig.ACKS_CONFIG, "1");
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
    p.putAll(extra);
    return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
  }

  /** Count one access of {@code key}. Never blocks on I/O; drops when the buffer is full. */
  public void record(Object key) {
    record(key, 1);
  }

  public void record(Object key, long n) {
    KeyId id = new KeyId(Keys.toBytes(key), 0);
    synchronized (lock) {
      long[] c = buf.get(id);
      if (c != null) {
        c[0] += n;
      } else if (buf.size() < maxKeys) {
        buf.put(id, new long[] {n});
      } else {
        dropped.add(n);
      }
    }
  }

  /** Send what is buffered now (the background thread does this every interval). */
  public void flush() {
    Map<KeyId, long[]> mine;
    synchronized (lock) {
      if (buf.isEmpty()) {
        return;
      }
      mine = buf;
      buf = new HashMap<>();
    }
    List<PartitionInfo> parts = producer.partitionsFor(topic);
    int nparts = 0;
    for (PartitionInfo p : parts) {
      nparts = Math.max(nparts, p.partition() + 1);
    }
    Map<Integer, List<Map.Entry<KeyId, long[]>>> byPart = new HashMap<>();
    for (Map.Entry<KeyId, long[]> e : mine.entrySet()) {
      byPart.computeIfAbsent(Murmur3.partition(e.getKey().key(), nparts), k -> new ArrayList<>())
          .add(e);
    }
    for (Map.Entry<Integer, List<Map.Entry<KeyId, long[]>>> p : byPart.entrySet()) {
      for (byte[] value : encodeCounts(p.getValue())) {
        producer.send(new ProducerRecord<>(topic, p.getKey(), null, value), (md, ex) -> {
          if (ex != null) {
            sendErrors.increment();
            LOG.warn("reporter: delivery to {} failed: {}", topic, ex.getMessage());
          } else {
            messagesSent.increment();
          }
        });
      }
    }
  }

  private List<byte[]> encodeCounts(List<Map.Entry<KeyId, long[]>> items) {
    List<byte[]> out = new ArrayList<>();
    ByteArrayOutputStream lines = new ByteArrayOutputStream();
    ObjectNode odd = null;
    int oddSize = 0;
    for (Map.Entry<KeyId, long[]> e : items) {
      byte[] k = e.getKey().key();
      long n = e.getValue()[0];
      if (n < 1) {
        continue;
      }
      if (n > MAX_COUNT) {
        dropped.add(n - MAX_COUNT);
        n = MAX_COUNT;
      }
      accessesSent.add(n);
      if (linesSafe(k)) {
        byte[] tail = ("\t" + n + "\n").getBytes(StandardCharsets.US_ASCII);
        if (lines.size() + k.length + tail.length > maxMessageBytes && lines.size() > 0) {
          out.add(lines.toByteArray());
          lines.reset();
        }
        lines.writeBytes(k);
        lines.writeBytes(tail);
      } else {
        int est = k.length * 2 + 24;
        if (odd != null && oddSize + est > maxMessageBytes) {
          out.add(Wire.dumps(odd));
          odd = null;
        }
        if (odd == null) {
          odd = Wire.JSON.createObjectNode();
          odd.put("v", 1);
          odd.putArray("keys");
          oddSize = 0;
        }
        ArrayNode entry = ((ArrayNode) odd.get("keys")).addArray();
        String text = Wire.strictUtf8(k);
        if (text != null) {
          entry.add(text).add(n);
        } else {
          entry.add(Base64.getEncoder().encodeToString(k)).add(n).add("b64");
        }
        oddSize += est;
      }
    }
    if (lines.size() > 0) {
      out.add(lines.toByteArray());
    }
    if (odd != null) {
      out.add(Wire.dumps(odd));
    }
    return out;
  }

  static boolean linesSafe(byte[] k) {
    if (k.length == 0 || k[0] == '{') {
      return false;
    }
    for (byte b : k) {
      if (b == '\t' || b == '\n' || b == '\r') {
        return false;
      }
    }
    return true;
  }

  private void flushSafely() {
    try {
      flush();
    } catch (RuntimeException e) {
      LOG.warn("reporter: flush failed: {}", e.getMessage());
    }
  }

  /** Flush what is buffered and stop; idempotent. */
  @Override
  public void close() {
    if (closed) {
      return;
    }
    closed = true;
    timer.shutdown();
    try {
      timer.awaitTermination(2, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    flushSafely();
    producer.flush();
    producer.close(Duration.ofSeconds(5));
  }
}
