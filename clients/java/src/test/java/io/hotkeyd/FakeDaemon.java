package io.hotkeyd;

import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.charset.StandardCharsets;
import redis.clients.jedis.UnifiedJedis;

/**
 * Writes what a daemon instance writes (snapshot, registry, events) so client tests can set up
 * exact hot sets; the end-to-end tests use the real daemon instead.
 */
final class FakeDaemon {
  final UnifiedJedis jedis;
  final Namespace ns;
  final String instance;
  long seq;

  FakeDaemon(UnifiedJedis jedis, Namespace ns, String instance) {
    this.jedis = jedis;
    this.ns = ns;
    this.instance = instance;
  }

  static ObjectNode hot(String key, long ttlMs) {
    ObjectNode e = Wire.encodeKey(key.getBytes(StandardCharsets.UTF_8));
    e.put("rate", 1000.0).put("rule", "default").put("ttl_ms", ttlMs).put("since", 0.0);
    return e;
  }

  ObjectNode message(boolean full, ObjectNode[] hot, String... cool) {
    ObjectNode m = Wire.JSON.createObjectNode();
    m.put("v", 1).put("instance", instance).put("seq", seq)
        .put("ts", System.currentTimeMillis() / 1000.0).put("full", full).put("final", false);
    ArrayNode h = m.putArray("hot");
    for (ObjectNode e : hot) {
      h.add(e);
    }
    ArrayNode c = m.putArray("cool");
    for (String k : cool) {
      c.add(Wire.encodeKey(k.getBytes(StandardCharsets.UTF_8)).put("rule", "default"));
    }
    return m;
  }

  /** Store a snapshot with seq = current seq and register the instance. */
  void snapshot(ObjectNode... hot) {
    ObjectNode m = message(true, hot);
    m.putArray("top");
    jedis.set(ns.snapshot(instance).getBytes(StandardCharsets.UTF_8), Wire.dumps(m));
    jedis.zadd(ns.instances(), System.currentTimeMillis() / 1000.0, instance);
  }

  /** Publish the next message (seq + 1) announcing {@code hot}. */
  void publish(ObjectNode... hot) {
    seq++;
    send(Wire.dumps(message(false, hot)));
  }

  /** Publish the next message cooling {@code keys}. */
  void cool(String... keys) {
    seq++;
    send(Wire.dumps(message(false, new ObjectNode[0], keys)));
  }

  /** One watch heartbeat of {@code node} (spec/schema/watch-heartbeat-v1.json), every key armed. */
  void heartbeat(String node, long epoch) {
    ObjectNode m = Wire.JSON.createObjectNode();
    m.put("v", 1).put("instance", instance).put("node", node).put("epoch", epoch).put("up", true)
        .put("armed", seq).put("ts", System.currentTimeMillis() / 1000.0);
    send(ns.watchChannel().getBytes(StandardCharsets.UTF_8), Wire.dumps(m));
  }

  /** PUBLISH, or SPUBLISH as the daemon's --sharded-pubsub when the namespace is sharded. */
  private void send(byte[] payload) {
    send(ns.channel().getBytes(StandardCharsets.UTF_8), payload);
  }

  private void send(byte[] channel, byte[] payload) {
    if (!ns.sharded()) {
      jedis.publish(channel, payload);
    } else if (jedis instanceof redis.clients.jedis.JedisCluster c) {
      c.spublish(channel, payload);
    } else {
      jedis.sendCommand(redis.clients.jedis.Protocol.Command.SPUBLISH, channel, payload);
    }
  }

  /** Skip a seq number (a lost message). */
  void lose() {
    seq++;
  }
}
