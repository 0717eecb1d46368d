package io.hotkeyd;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.IdentityHashMap;
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
import org.apache.kafka.common.errors.NetworkException;
import org.apache.kafka.common.errors.NotEnoughReplicasAfterAppendException;
import org.apache.kafka.common.errors.RetriableException;
import org.apache.kafka.common.errors.TimeoutException;
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
 *
 * <p>Nothing is lost silently, nothing is counted twice: each message keeps the counts it
 * carries until its send callback reports the result. Delivered: {@link #accessesSent}. A
 * retriable error the broker answered with (it appended nothing): only that message's counts are
 * merged back for the next flush ({@link #requeued}; beyond maxKeys dropped and counted). A
 * failure a retry cannot fix (record too large, not authorized) or whose outcome is unknown
 * (timed out, connection lost, pending at close): dropped and counted in {@link #dropped}, never
 * re-sent. {@code recorded = accessesSent + dropped + buffered()}.
 */
public final class Reporter implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger(Reporter.class);
  static final long MAX_COUNT = Limits.COUNT_MAX;

  private final Producer<byte[], byte[]> producer;
  private final String topic;
  private final int maxKeys;
  private final int maxMessageBytes;
  private final Object lock = new Object();
  private Map<KeyId, long[]> buf = new HashMap<>();
  private final ScheduledExecutorService timer;
  private volatile boolean closed;
  private boolean closing; // under lock: failed counts are dropped, never merged back
  private final Map<Message, Boolean> inFlight = new IdentityHashMap<>(); // under lock
  private long inFlightAccesses; // under lock
  /**
   * Accesses dropped and counted: buffer full, a count over 2^32-1 or below 1, a message that
   * failed for good or whose delivery is unknown, unsent at close.
   */
  public final LongAdder dropped = new LongAdder();
  /** Accesses in messages the broker acknowledged. */
  public final LongAdder accessesSent = new LongAdder();
  public final LongAdder messagesSent = new LongAdder();
  /** Messages whose send failed. */
  public final LongAdder sendErrors = new LongAdder();
  /** Accesses passed to {@link #record}. */
  public final LongAdder recorded = new LongAdder();
  /** Accesses of failed messages merged back to be sent by a later flush. */
  public final LongAdder requeued = new LongAdder();

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

  static Producer<byte[], byte[]> newProducer(String bootstrap, Properties extra) {
    Properties p = new Properties();
    p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
    p.put(ProducerConfig.CLIENT_ID_CONFIG, "hotkeyd-reporter");
    p.put(ProducerConfig.LINGER_MS_CONFIG, 5);
    p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, 2000);
    p.put(ProducerConfig.ACKS_CONFIG, "1");
    // At most once without idempotent writes (Tansu fences the epoch bump an idempotent
    // producer makes after a delivery timeout, failing every later send): the producer never
    // re-sends a request on its own, since one that timed out may have been appended. A
    // retriable error the broker answered with is re-queued by the reporter itself (only that
    // message's counts, next flush); a timeout or a lost connection is dropped and counted.
    p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, false);
    p.put(ProducerConfig.RETRIES_CONFIG, 0);
    p.putAll(extra);
    return new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
  }

  /** Count one access of {@code key}. Never blocks on I/O; drops when the buffer is full. */
  public void record(Object key) {
    record(key, 1);
  }

  public void record(Object key, long n) {
    KeyId id = new KeyId(Keys.toBytes(key), 0);
    if (n < 1) { // not a count: one dropped access (a negative n would hide others)
      recorded.increment();
      dropped.increment();
      LOG.warn("reporter: dropped an access: count {} is not >= 1", n);
      return;
    }
    recorded.add(n);
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

  /** Accesses still buffered or in messages whose result is not known yet. */
  public long buffered() {
    synchronized (lock) {
      long n = inFlightAccesses;
      for (long[] c : buf.values()) {
        n += c[0];
      }
      return n;
    }
  }

  /** One message and the counts it carries until its send result is known. */
  private static final class Message {
    final byte[] value;
    final List<Map.Entry<KeyId, long[]>> items;
    final long total;

    Message(byte[] value, List<Map.Entry<KeyId, long[]>> items) {
      this.value = value;
      this.items = items;
      long t = 0;
      for (Map.Entry<KeyId, long[]> e : items) {
        t += e.getValue()[0];
      }
      this.total = t;
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
    int nparts = 0;
    try {
      for (PartitionInfo p : producer.partitionsFor(topic)) {
        nparts = Math.max(nparts, p.partition() + 1);
      }
    } catch (RuntimeException e) {
      LOG.warn("reporter: no metadata for topic {}: {}", topic, e.getMessage());
    }
    if (nparts == 0) { // nothing was sent: everything goes back (bounded)
      synchronized (lock) {
        mergeBackLocked(mine.entrySet());
      }
      return;
    }
    Map<Integer, List<Map.Entry<KeyId, long[]>>> byPart = new HashMap<>();
    for (Map.Entry<KeyId, long[]> e : mine.entrySet()) {
      byPart.computeIfAbsent(Murmur3.partition(e.getKey().key(), nparts), k -> new ArrayList<>())
          .add(e);
    }
    for (Map.Entry<Integer, List<Map.Entry<KeyId, long[]>>> p : byPart.entrySet()) {
      for (Message m : encodeCounts(p.getValue())) {
        synchronized (lock) {
          inFlight.put(m, Boolean.TRUE);
          inFlightAccesses += m.total;
        }
        try {
          producer.send(new ProducerRecord<>(topic, p.getKey(), null, m.value),
              (md, ex) -> completed(m, ex));
        } catch (RuntimeException e) { // not queued (closed producer, serializer)
          completed(m, e);
        }
      }
    }
  }

  private void completed(Message m, Exception ex) {
    boolean requeue = false;
    synchronized (lock) {
      if (inFlight.remove(m) == null) {
        return; // already counted (close gave up on it)
      }
      inFlightAccesses -= m.total;
      if (ex == null) {
        messagesSent.increment();
        accessesSent.add(m.total);
        return;
      }
      sendErrors.increment();
      requeue = !closing && neverAppendedAndRetriable(ex);
      if (requeue) {
        requeued.add(m.total);
        mergeBackLocked(m.items);
      } else {
        dropped.add(m.total);
      }
    }
    LOG.warn("reporter: a message to {} ({} accesses of {} keys) failed: {}; {}", topic, m.total,
        m.items.size(), ex.toString(), requeue ? "re-queued for the next flush"
            : "dropped and counted");
  }

  /**
   * Whether sending the same counts again is useful and never a double count: a retriable error
   * the broker answered with (it appended nothing). A timeout or a lost connection leaves the
   * outcome unknown (at most once: drop).
   */
  static boolean neverAppendedAndRetriable(Exception ex) {
    return ex instanceof RetriableException && !(ex instanceof TimeoutException)
        && !(ex instanceof NetworkException)
        && !(ex instanceof NotEnoughReplicasAfterAppendException);
  }

  private void mergeBackLocked(Iterable<Map.Entry<KeyId, long[]>> items) {
    for (Map.Entry<KeyId, long[]> e : items) {
      long n = e.getValue()[0];
      long[] c = buf.get(e.getKey());
      if (closing) {
        dropped.add(n);
      } else if (c != null) {
        c[0] += n;
      } else if (buf.size() < maxKeys) {
        buf.put(e.getKey(), new long[] {n});
      } else {
        dropped.add(n);
      }
    }
  }

  private List<Message> encodeCounts(List<Map.Entry<KeyId, long[]>> items) {
    List<Message> out = new ArrayList<>();
    ByteArrayOutputStream lines = new ByteArrayOutputStream();
    List<Map.Entry<KeyId, long[]>> lineItems = new ArrayList<>();
    ObjectNode odd = null;
    List<Map.Entry<KeyId, long[]>> oddItems = new ArrayList<>();
    int oddSize = 0;
    for (Map.Entry<KeyId, long[]> e : items) {
      byte[] k = e.getKey().key();
      long n = e.getValue()[0];
      if (n > MAX_COUNT) {
        dropped.add(n - MAX_COUNT);
        n = MAX_COUNT;
      }
      Map.Entry<KeyId, long[]> carried = Map.entry(e.getKey(), new long[] {n});
      if (linesSafe(k)) {
        byte[] tail = ("\t" + n + "\n").getBytes(StandardCharsets.US_ASCII);
        if (lines.size() + k.length + tail.length > maxMessageBytes && lines.size() > 0) {
          out.add(new Message(lines.toByteArray(), lineItems));
          lines.reset();
          lineItems = new ArrayList<>();
        }
        lines.writeBytes(k);
        lines.writeBytes(tail);
        lineItems.add(carried);
      } else {
        int est = k.length * 2 + 24;
        if (odd != null && oddSize + est > maxMessageBytes) {
          out.add(new Message(Wire.dumps(odd), oddItems));
          odd = null;
          oddItems = new ArrayList<>();
        }
        if (odd == null) {
          odd = Wire.JSON.createObjectNode();
          odd.put("v", 1);
          odd.putArray("keys");
          oddSize = 0;
        }
        oddItems.add(carried);
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
      out.add(new Message(lines.toByteArray(), lineItems));
    }
    if (odd != null) {
      out.add(new Message(Wire.dumps(odd), oddItems));
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

  /**
   * Flush what is buffered and stop; idempotent. What could not be sent, and messages whose
   * delivery is still unknown when the producer is closed, are counted in {@link #dropped}.
   */
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
    long unsent = 0;
    synchronized (lock) { // failures from now on are dropped, never merged back
      closing = true;
      for (long[] c : buf.values()) {
        unsent += c[0];
      }
      buf = new HashMap<>();
      dropped.add(unsent);
    }
    try {
      producer.close(Duration.ofSeconds(5)); // sends what is queued, waits for the results
    } catch (RuntimeException e) {
      LOG.warn("reporter: closing the producer failed: {}", e.getMessage());
    }
    long unknown = 0;
    synchronized (lock) {
      for (Message m : inFlight.keySet()) {
        unknown += m.total;
      }
      inFlight.clear();
      inFlightAccesses = 0;
      dropped.add(unknown);
    }
    if (unsent + unknown > 0) {
      LOG.warn("reporter: closed with {} accesses unsent and {} of unknown delivery, counted as"
          + " dropped", unsent, unknown);
    }
  }
}
