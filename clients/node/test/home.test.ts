// Plain pub/sub on a real Redis Cluster: the subscriber sits on the primary that owns the
// invalidation channel's slot (where the daemon and the other SDKs publish), follows a
// failover and a slot move there, and neither start() nor close() hangs on a dead or
// frozen home node.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { test } from "node:test";
import { Cluster, Redis } from "ioredis";
import { encodeInvalidation, HotCache, HotkeydUnreachableError, Namespace, Subscriber, type RedisLike } from "../src/index.js";
import { TestCluster, type ClusterNode } from "./cluster.js";
import { freePort, waitFor } from "./helpers.js";

/** A namespace of unique name whose invalidation channel lives on node (of cluster). */
async function namespaceOn(cluster: TestCluster, node: ClusterNode | undefined, tag: string): Promise<Namespace> {
  for (;;) {
    const ns = new Namespace(`${tag}-${randomBytes(4).toString("hex")}`);
    if (node === undefined || (await cluster.nodeFor(ns.invalidateChannel)) === node) return ns;
  }
}

/** A subscriber that records when each invalidation arrived (keys "<n>"). */
function invalidationSubscriber(client: RedisLike, ns: Namespace, extra: object = {}) {
  const arrived = new Map<string, number>();
  let resets = 0;
  const sub = new Subscriber(client, {
    namespace: ns,
    onInvalidate: (_origin, keys) => {
      for (const k of keys) arrived.set(k.toString(), performance.now());
    },
    onReset: () => resets++,
    ...extra,
  });
  return { sub, arrived, resets: () => resets };
}

function direct(n: ClusterNode, password?: string): Redis {
  const r = new Redis({ port: n.port, host: "127.0.0.1", password, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  r.on("error", () => {});
  return r;
}

/** Publish invalidation key on node until sub saw it (a new subscription may lag a little). */
async function deliveredVia(n: ClusterNode, ns: Namespace, arrived: Map<string, number>, key: string, timeoutMs = 10_000, password?: string): Promise<void> {
  const r = direct(n, password);
  try {
    await waitFor(`invalidation ${key} published on ${n.port}`, timeoutMs, async () => {
      await r.publish(ns.invalidateChannel, encodeInvalidation("test", [Buffer.from(key)]));
      await new Promise((res) => setTimeout(res, 50));
      return arrived.has(key);
    });
  } finally {
    r.disconnect();
  }
}

function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

test("on a 3-primary cluster each subscriber is on its invalidation channel's home primary", async () => {
  const cluster = await TestCluster.start(3, 0);
  try {
    const subs = [];
    for (const [i, node] of cluster.nodes.entries()) {
      const ns = await namespaceOn(cluster, node, `home${i}`);
      const s = invalidationSubscriber(cluster.client(), ns); // a new client: no slot map yet
      await s.sub.start();
      subs.push({ ...s, ns, node });
    }
    try {
      for (const { ns, node } of subs) {
        for (const n of cluster.nodes) {
          assert.equal(await cluster.subscribers(n, ns.invalidateChannel), n === node ? 1 : 0,
            `subscribers of ${ns.invalidateChannel} on ${n.port} (home ${node.port})`);
        }
      }
      // Latency: paced PUBLISHes on the home node, received by the subscriber (home) and by
      // a plain connection subscribed on another node (the cluster bus: Nagle on 7.0).
      const { ns, node, arrived } = subs[0]!;
      const other = cluster.nodes.find((n) => n !== node)!;
      const viaBus = new Map<string, number>();
      const bus = direct(other);
      bus.on("messageBuffer", (_ch: Buffer, m: Buffer) => viaBus.set(JSON.parse(m.toString()).keys[0].key, performance.now()));
      await bus.subscribe(ns.invalidateChannel);
      const pub = direct(node);
      const sent = new Map<string, number>();
      for (let i = 0; i < 60; i++) {
        const key = `lat${i}`;
        sent.set(key, performance.now());
        await pub.publish(ns.invalidateChannel, encodeInvalidation("test", [Buffer.from(key)]));
        await new Promise((r) => setTimeout(r, 15));
      }
      await waitFor("every invalidation", 5000, () => [...sent.keys()].every((k) => arrived.has(k)));
      await new Promise((r) => setTimeout(r, 100));
      const home = [...sent].map(([k, t]) => arrived.get(k)! - t);
      const far = [...sent].filter(([k]) => viaBus.has(k)).map(([k, t]) => viaBus.get(k)! - t);
      const fmt = (xs: number[]) => xs.length ? `p50 ${quantile(xs, 0.5).toFixed(2)} / p99 ${quantile(xs, 0.99).toFixed(2)} / max ${Math.max(...xs).toFixed(2)} ms` : "none";
      console.log(`invalidation arrival, published on the home node: subscriber (home) ${fmt(home)}; a subscription on another node ${fmt(far)}`);
      assert.ok(quantile(home, 0.5) < 10, `home-node arrival p50 ${quantile(home, 0.5)} ms`);
      bus.disconnect();
      pub.disconnect();
    } finally {
      for (const { sub } of subs) await sub.close();
    }
  } finally {
    await cluster.stop();
  }
});

test("with requirepass the home connection authenticates with the Cluster's redisOptions", async () => {
  const password = `pw-${randomBytes(6).toString("hex")}`;
  const cluster = await TestCluster.start(3, 0, 2000, password);
  try {
    const ns = await namespaceOn(cluster, undefined, "auth");
    const home = await cluster.nodeFor(ns.invalidateChannel);
    const { sub, arrived } = invalidationSubscriber(cluster.client(), ns);
    await sub.start();
    try {
      assert.equal(await cluster.subscribers(home, ns.invalidateChannel), 1);
      await deliveredVia(home, ns, arrived, "authed", 5000, password);
    } finally {
      await sub.close();
    }
  } finally {
    await cluster.stop();
  }
});

test("after CLUSTER FAILOVER of the home primary the subscriber moves to the new primary", async () => {
  const cluster = await TestCluster.start(3, 1);
  try {
    const ns = await namespaceOn(cluster, undefined, "failover");
    const home = await cluster.nodeFor(ns.invalidateChannel);
    const { sub, arrived, resets } = invalidationSubscriber(cluster.client(), ns);
    await sub.start();
    try {
      assert.equal(await cluster.subscribers(home, ns.invalidateChannel), 1);
      await deliveredVia(home, ns, arrived, "before");
      const connects = sub.stats.connects;
      const resetsBefore = resets();
      const t0 = Date.now();
      const next = await cluster.failover(home);
      await waitFor("the subscription on the new primary", 15_000, async () => (await cluster.subscribers(next, ns.invalidateChannel)) === 1);
      console.log(`subscription moved to the new primary ${Date.now() - t0} ms after CLUSTER FAILOVER began`);
      await waitFor("the old connection closed", 5000, async () => (await cluster.subscribers(home, ns.invalidateChannel)) === 0);
      await deliveredVia(next, ns, arrived, "after");
      assert.ok(sub.stats.connects > connects, "the move is a new subscription");
      assert.ok(resets() > resetsBefore, "the move dropped the local copies (onReset)");
    } finally {
      await sub.close();
    }
  } finally {
    await cluster.stop();
  }
});

test("after the invalidation channel's slot moves the subscriber follows it", async () => {
  const cluster = await TestCluster.start(3, 0);
  try {
    const ns = await namespaceOn(cluster, undefined, "reshard");
    const home = await cluster.nodeFor(ns.invalidateChannel);
    const client = cluster.client();
    await client.set(ns.snapshot("x"), "not a snapshot"); // a key that moves with the slot
    const { sub, arrived } = invalidationSubscriber(client, ns);
    await sub.start();
    try {
      assert.equal(await cluster.subscribers(home, ns.invalidateChannel), 1, "not on the home node before the move");
      const dst = cluster.nodes.find((n) => n !== home)!;
      const t0 = Date.now();
      await cluster.migrateSlot(await cluster.slotOf(ns.invalidateChannel), dst);
      await waitFor("the subscription on the slot's new owner", 15_000, async () => (await cluster.subscribers(dst, ns.invalidateChannel)) === 1);
      console.log(`subscription on the slot's new owner ${Date.now() - t0} ms after the move began`);
      await waitFor("the old connection closed", 5000, async () => (await cluster.subscribers(home, ns.invalidateChannel)) === 0);
      await deliveredVia(dst, ns, arrived, "moved");
    } finally {
      await sub.close();
    }
  } finally {
    await cluster.stop();
  }
});

test("home primary SIGKILLed: the subscription moves to a node that answers, and close() is prompt", async () => {
  const cluster = await TestCluster.start(3, 0);
  try {
    const ns = await namespaceOn(cluster, undefined, "killed");
    const home = await cluster.nodeFor(ns.invalidateChannel);
    const { sub, arrived } = invalidationSubscriber(cluster.client(), ns);
    await sub.start();
    try {
      const lost = sub.stats.lost;
      cluster.kill(home);
      const others = cluster.nodes.filter((n) => n !== home);
      await waitFor("a subscription on another node", 15_000, async () => {
        let count = 0;
        for (const n of others) count += await cluster.subscribers(n, ns.invalidateChannel);
        return count === 1;
      });
      assert.ok(sub.stats.lost > lost, "the lost subscription was counted");
      await deliveredVia(others[0]!, ns, arrived, "fallback");
      for (const n of others) cluster.kill(n); // nothing left
      await new Promise((r) => setTimeout(r, 300));
    } finally {
      const t0 = Date.now();
      await sub.close();
      const took = Date.now() - t0;
      console.log(`close() with every node dead took ${took} ms`);
      assert.ok(took < 5000, `close() took ${took} ms`);
    }
  } finally {
    await cluster.stop();
  }
});

test("home primary frozen (DEBUG SLEEP): close() is prompt, start() rejects within startTimeoutMs, nothing is left connected", async () => {
  const cluster = await TestCluster.start(3, 0);
  try {
    const ns = await namespaceOn(cluster, undefined, "frozen");
    const home = await cluster.nodeFor(ns.invalidateChannel);
    const client = cluster.client();
    const a = invalidationSubscriber(client, ns, { healthIntervalMs: 300 });
    await a.sub.start();
    const sleeper = direct(home);
    const sleepS = 8;
    const slept = sleeper.call("DEBUG", "SLEEP", String(sleepS)).catch(() => {});
    const frozenAt = Date.now();
    try {
      await new Promise((r) => setTimeout(r, 200));
      // The snapshots live in the channel's slot, on the frozen node: no bootstrap there.
      const startTimeoutMs = 1500;
      const b = invalidationSubscriber(client, ns, { startTimeoutMs });
      const t0 = Date.now();
      await assert.rejects(b.sub.start(), (e: unknown) => e instanceof HotkeydUnreachableError);
      const took = Date.now() - t0;
      assert.ok(took <= startTimeoutMs + 500, `start() rejected after ${took} ms`);
      // a's PING finds the frozen node silent; its subscription goes to a node that answers
      const others = cluster.nodes.filter((n) => n !== home);
      await waitFor("a subscription on another node", 7000, async () => {
        let count = 0;
        for (const n of others) count += await cluster.subscribers(n, ns.invalidateChannel);
        return count === 1;
      });
      console.log(`subscription on another node ${Date.now() - frozenAt} ms after the home node froze`);
      assert.ok(a.sub.stats.halfOpen >= 1, "the frozen subscription was found by PING");
      await deliveredVia(others[0]!, ns, a.arrived, "while-frozen", 2000);
    } finally {
      const t0 = Date.now();
      await a.sub.close();
      const took = Date.now() - t0;
      console.log(`close() with the home primary frozen took ${took} ms`);
      assert.ok(took < 5000, `close() took ${took} ms`);
    }
    assert.ok(Date.now() - frozenAt < sleepS * 1000, "the node woke before the checks ended");
    await slept;
    sleeper.disconnect();
    // Once the node is back, no connection of either subscriber is left anywhere.
    await waitFor("no subscriber left", 5000, async () => {
      let count = 0;
      for (const n of cluster.nodes) count += await cluster.subscribers(n, ns.invalidateChannel);
      return count === 0;
    });
  } finally {
    await cluster.stop();
  }
});

test("HotCache.close() is prompt with every node of the cluster frozen (DEBUG SLEEP)", async () => {
  const cluster = await TestCluster.start(3, 0);
  try {
    const ns = await namespaceOn(cluster, undefined, "cache");
    const client = cluster.client();
    const cache = await new HotCache(client, { namespace: ns, demandIntervalMs: 60_000 }).start();
    await client.set("k", "v");
    const pub = direct(cluster.nodes[0]!);
    await pub.publish(ns.eventsChannel, JSON.stringify({
      v: 1, instance: "d", seq: 1, ts: Date.now() / 1000, full: false, final: false, cool: [],
      hot: [{ key: "k", rate: 5000, rule: "default", ttl_ms: 60_000, since: 0 }],
    }));
    pub.disconnect();
    await waitFor("k hot", 5000, () => cache.hotSet.getText("k") !== undefined);
    for (let i = 0; i < 3; i++) assert.equal(await cache.get("k"), "v");
    assert.ok(cache.stats.hits > 0, "no read served locally: no demand report pending");
    const sleepers = cluster.nodes.map((n) => direct(n));
    const slept = sleepers.map((s) => s.call("DEBUG", "SLEEP", "6").catch(() => {}));
    await new Promise((r) => setTimeout(r, 200));
    const t0 = Date.now();
    await cache.close(); // its last demand report cannot be sent
    const took = Date.now() - t0;
    console.log(`HotCache.close() with every node frozen took ${took} ms`);
    assert.ok(took < 5000, `close() took ${took} ms`);
    for (const s of sleepers) s.disconnect(); // the nodes are killed asleep
    void slept;
  } finally {
    await cluster.stop();
  }
});

test("HotCache writes and invalidate() on a cluster publish on the invalidation channel's home primary", async () => {
  const cluster = await TestCluster.start(3, 0);
  try {
    const home = cluster.nodes[0]!;
    const ns = await namespaceOn(cluster, home, "cachepub");
    let away = "";
    let near = "";
    for (let i = 0; !away || !near; i++) {
      const n = await cluster.nodeFor(`k${i}`);
      if (n === home && !near) near = `k${i}`;
      if (n !== home && !away) away = `k${i}`;
    }
    const client = cluster.client();
    const cache = await new HotCache(client, { namespace: ns, demandIntervalMs: 60_000 }).start();
    const seen = new Map<number, string[]>();
    const monitors = [];
    for (const n of cluster.nodes) {
      const m = await direct(n).monitor();
      seen.set(n.port, []);
      m.on("monitor", (_t: string, args: string[]) => {
        if (String(args[0]).toLowerCase() === "publish" && args[1] === ns.invalidateChannel) seen.get(n.port)!.push(String(args[2]));
      });
      monitors.push(m);
    }
    try {
      await cache.set(away, "1"); // the key's node is not home: the PUBLISH follows the write
      await cache.set(near, "2"); // the same node: one pipeline
      await cache.invalidate(away);
      await waitFor("three invalidations on the home node", 5000, () => seen.get(home.port)!.length === 3);
      for (const n of cluster.nodes) {
        if (n !== home) assert.deepEqual(seen.get(n.port), [], `invalidations published on ${n.port}, not home ${home.port}`);
      }
      const keys = seen.get(home.port)!.map((m) => JSON.parse(m).keys[0].key);
      assert.deepEqual(keys, [away, near, away]);
      assert.equal(await client.get(away), "1");
    } finally {
      for (const m of monitors) m.disconnect();
      await cache.close();
    }
  } finally {
    await cluster.stop();
  }
});

test("start() on a Cluster with nothing reachable rejects within startTimeoutMs", async () => {
  const ports = [await freePort(), await freePort(), await freePort()];
  const client = new Cluster(ports.map((port) => ({ host: "127.0.0.1", port })), { lazyConnect: true });
  client.on("error", () => {});
  const startTimeoutMs = 1500;
  const { sub } = invalidationSubscriber(client, new Namespace("nowhere"), { startTimeoutMs });
  const t0 = Date.now();
  await assert.rejects(sub.start(), (e: unknown) => e instanceof HotkeydUnreachableError);
  const took = Date.now() - t0;
  assert.ok(took <= startTimeoutMs + 500, `rejected after ${took} ms`);
  client.disconnect();
});
