package io.hotkeyd;

import java.io.IOException;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import redis.clients.jedis.HostAndPort;
import redis.clients.jedis.Jedis;

/**
 * A throwaway Redis Cluster of {@code n} primaries on free ports: slots spread with CLUSTER
 * ADDSLOTSRANGE and nodes introduced with CLUSTER MEET (what redis-cli --cluster create does).
 */
final class RedisCluster implements AutoCloseable {
  final List<RedisServer> nodes = new ArrayList<>();

  RedisCluster(int n) throws Exception {
    try {
      List<Integer> bus = new ArrayList<>();
      for (int i = 0; i < n; i++) {
        int b = RedisServer.freePort();
        bus.add(b);
        nodes.add(new RedisServer(List.of("--cluster-enabled", "yes", "--cluster-port",
            Integer.toString(b), "--cluster-node-timeout", "2000", "--cluster-config-file",
            "nodes.conf")));
      }
      for (int i = 1; i < n; i++) {
        try (Jedis j = new Jedis("127.0.0.1", nodes.get(i).port)) {
          j.sendCommand(redis.clients.jedis.Protocol.Command.CLUSTER, "MEET", "127.0.0.1",
              Integer.toString(nodes.get(0).port), Integer.toString(bus.get(0)));
        }
      }
      int step = 16384 / n;
      for (int i = 0; i < n; i++) {
        int lo = i * step;
        int hi = i == n - 1 ? 16383 : (i + 1) * step - 1;
        try (Jedis j = new Jedis("127.0.0.1", nodes.get(i).port)) {
          j.sendCommand(redis.clients.jedis.Protocol.Command.CLUSTER, "ADDSLOTSRANGE",
              Integer.toString(lo), Integer.toString(hi));
        }
      }
      long deadline = System.nanoTime() + 30_000_000_000L;
      while (!settled()) {
        if (System.nanoTime() > deadline) {
          throw new IOException("cluster did not settle");
        }
        Thread.sleep(50);
      }
    } catch (Exception e) {
      close();
      throw e;
    }
  }

  private boolean settled() {
    for (RedisServer s : nodes) {
      try (Jedis j = new Jedis("127.0.0.1", s.port)) {
        if (!j.clusterInfo().contains("cluster_state:ok")
            || j.clusterNodes().lines().filter(l -> !l.isBlank()).count() != nodes.size()) {
          return false;
        }
      }
    }
    return true;
  }

  Set<HostAndPort> hosts() {
    Set<HostAndPort> out = new HashSet<>();
    for (RedisServer s : nodes) {
      out.add(new HostAndPort("127.0.0.1", s.port));
    }
    return out;
  }

  @Override
  public void close() {
    for (RedisServer s : nodes) {
      s.close();
    }
  }
}
