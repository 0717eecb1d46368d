package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.JedisPooled;

class SubscriberTest {
  static RedisServer server;
  static JedisPooled jedis;

  @BeforeAll
  static void up() throws Exception {
    server = new RedisServer();
    jedis = new JedisPooled("127.0.0.1", server.port);
  }

  @AfterAll
  static void down() throws Exception {
    jedis.close();
    server.close();
  }

  static void await(BooleanSupplier cond, String what) throws InterruptedException {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!cond.getAsBoolean()) {
      if (System.nanoTime() > deadline) {
        throw new AssertionError("timed out waiting for " + what);
      }
      Thread.sleep(5);
    }
  }

  static KeyId k(String s) {
    return KeyId.of(s);
  }

  @Test
  void bootstrapStreamGapResyncTtlAndListeners() throws Exception {
    Namespace ns = Namespace.of("sub-" + System.nanoTime());
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.seq = 5;
    d.snapshot(FakeDaemon.hot("a", 60_000));
    List<String> events = new CopyOnWriteArrayList<>();
    try (Subscriber sub = Subscriber.builder(jedis).namespace(ns).build()) {
      sub.hotset().addListener(new HotListener() {
        @Override
        public void onHot(HotEntry e) {
          events.add("+" + new String(e.key(), StandardCharsets.UTF_8));
        }

        @Override
        public void onCool(KeyId key) {
          events.add("-" + key);
        }
      });
      sub.start();
      assertTrue(sub.awaitReady(10, TimeUnit.SECONDS));
      assertTrue(sub.hotset().isHot(k("a")), "bootstrap from the snapshot");

      d.publish(FakeDaemon.hot("b", 60_000));
      await(() -> sub.hotset().isHot(k("b")), "b hot");

      // A lost message: the next one reveals the gap; the resync reads the new snapshot.
      d.lose();
      d.snapshot(FakeDaemon.hot("b", 60_000), FakeDaemon.hot("c", 60_000)); // a cooled in the lost one
      d.publish(FakeDaemon.hot("e", 300));
      await(() -> sub.hotset().isHot(k("e")), "e hot");
      assertTrue(sub.hotset().isHot(k("c")));
      assertTrue(!sub.hotset().isHot(k("a")), "a cooled by the resync");
      assertEquals(1, sub.stats().gaps.get());

      // TTL expiry on the real clock
      await(() -> !sub.hotset().items().containsKey(k("e")), "e expires after 300 ms");
      assertTrue(events.contains("+b") && events.contains("-a") && events.contains("-e"), events.toString());

      d.cool("b");
      await(() -> !sub.hotset().isHot(k("b")), "b cooled");
    }
  }

  @Test
  void reconnectsWithBackoffAndRebootstraps() throws Exception {
    Namespace ns = Namespace.of("rec-" + System.nanoTime());
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("a", 60_000));
    try (Subscriber sub = Subscriber.builder(jedis).namespace(ns).backoff(0.05, 0.2).build().start()) {
      assertTrue(sub.awaitReady(10, TimeUnit.SECONDS));
      // While the subscription is down the daemon moves on; the re-bootstrap catches up.
      d.seq = 9;
      d.snapshot(FakeDaemon.hot("z", 60_000));
      jedis.sendCommand(redis.clients.jedis.Protocol.Command.CLIENT, "KILL", "TYPE", "pubsub");
      await(() -> sub.stats().reconnects.get() >= 1 && sub.hotset().isHot(k("z")), "reconnect");
      assertTrue(!sub.hotset().isHot(k("a")), sub.hotset().keys() + " " + sub.stats());
      d.publish(FakeDaemon.hot("y", 60_000));
      await(() -> sub.hotset().isHot(k("y")), "stream continues after reconnect");
    }
  }

  @Test
  void halfOpenConnectionIsPingedClosedAndReplaced() throws Exception {
    Namespace ns = Namespace.of("half-" + System.nanoTime());
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    d.snapshot(FakeDaemon.hot("a", 60_000));
    try (FreezableProxy proxy = new FreezableProxy(server.port);
         JedisPooled viaProxy = new JedisPooled("127.0.0.1", proxy.port);
         Subscriber sub = Subscriber.builder(viaProxy).namespace(ns).healthIntervalMillis(300)
             .backoff(0.05, 0.2).build().start()) {
      assertTrue(sub.awaitReady(10, TimeUnit.SECONDS));
      assertTrue(sub.hotset().isHot(k("a")));
      long connects = sub.stats().connects.get();

      // A healthy quiet subscription answers every PING (5 intervals): it is kept.
      Thread.sleep(1500);
      assertEquals(0, sub.stats().halfOpen.get(), "a quiet healthy connection was dropped");
      assertEquals(connects, sub.stats().connects.get());

      // The path stops forwarding without closing: only PING can tell.
      proxy.frozen = true;
      long frozenAt = System.nanoTime();
      d.seq = 9;
      d.snapshot(FakeDaemon.hot("z", 60_000)); // the daemon moves on meanwhile
      await(() -> sub.stats().halfOpen.get() >= 1, "the half-open subscription noticed");
      long noticedMs = (System.nanoTime() - frozenAt) / 1_000_000;
      assertTrue(noticedMs >= 300, "not before the health interval: " + noticedMs + " ms");
      assertEquals(connects, sub.stats().connects.get(), "no fresh subscription while frozen");

      proxy.frozen = false;
      await(() -> sub.stats().connects.get() > connects && sub.hotset().isHot(k("z")),
          "resubscribed and resynced from the snapshot once the path heals");
      assertTrue(!sub.hotset().isHot(k("a")), sub.hotset().keys() + " " + sub.stats());
      d.publish(FakeDaemon.hot("y", 60_000));
      await(() -> sub.hotset().isHot(k("y")), "the stream continues on the new connection");
    }
  }

  @Test
  void badMessagesAreCountedNotFatal() throws Exception {
    Namespace ns = Namespace.of("bad-" + System.nanoTime());
    FakeDaemon d = new FakeDaemon(jedis, ns, "d1");
    try (Subscriber sub = Subscriber.builder(jedis).namespace(ns).build().start()) {
      assertTrue(sub.awaitReady(10, TimeUnit.SECONDS));
      jedis.publish(ns.channel(), "{not json");
      jedis.publish(ns.channel(), "{\"v\":2}");
      d.snapshot();
      d.publish(FakeDaemon.hot("ok", 60_000));
      await(() -> sub.hotset().isHot(k("ok")), "valid message after bad ones");
      assertEquals(2, sub.stats().badMessages.get());
    }
  }
}
