// The failure contract (spec/failure.md): each scenario of spec/vectors/failure.json
// against a real redis-server.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";
import assert from "node:assert/strict";
import { Redis } from "ioredis";
import { HotCache, HotkeydUnreachableError, Namespace } from "../src/index.js";
import { limit } from "../src/limits.js";
import { freePort, startRedis, waitFor } from "./helpers.js";

const SPEC = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "spec");
interface Scenario { name: string; test_bound_ms?: number; bound_ms?: number; test_ttl_ms?: number; slack_ms: number }
const doc = JSON.parse(readFileSync(join(SPEC, "vectors", "failure.json"), "utf8")) as { scenarios: Scenario[] };
function scenario(name: string): Scenario {
  const s = doc.scenarios.find((x) => x.name === name);
  if (!s) throw new Error(`no scenario ${name} in spec/vectors/failure.json`);
  return s;
}

let seq = 0;
async function announce(admin: Redis, ns: Namespace, key: string, ttlMs: number): Promise<void> {
  seq++;
  await admin.publish(ns.eventsChannel, JSON.stringify({
    v: 1, instance: "d", seq, ts: Date.now() / 1000, full: false, final: false, cool: [],
    hot: [{ key, rate: 5000, rule: "default", ttl_ms: ttlMs, since: 0 }],
  }));
}

test("start() with Redis down rejects within the bound", async () => {
  const sc = scenario("start_redis_down");
  assert.equal(limit("start_timeout_ms"), 5000);
  const port = await freePort(); // nothing listens there
  const client = new Redis({ port, host: "127.0.0.1", lazyConnect: true });
  client.on("error", () => {});
  const t0 = Date.now();
  await assert.rejects(
    new HotCache(client, { startTimeoutMs: sc.test_bound_ms, demandIntervalMs: 0 }).start(),
    (e: unknown) => e instanceof HotkeydUnreachableError && /ECONNREFUSED/.test(e.message),
  );
  const took = Date.now() - t0;
  assert.ok(took <= sc.test_bound_ms! + sc.slack_ms, `rejected after ${took} ms`);
  client.disconnect();
});

test("a lost subscription drops every copy; the reconnect resyncs", async () => {
  const lost = scenario("subscription_lost");
  const again = scenario("reconnect");
  const srv = await startRedis();
  try {
    const admin = srv.client();
    const ns = new Namespace("fl");
    const c = await new HotCache(srv.client(), { namespace: ns, demandIntervalMs: 0 }).start();
    await admin.set("k", "old");
    await announce(admin, ns, "k", 60_000);
    await waitFor("hot", 5000, () => c.hotSet.getText("k") !== undefined);
    assert.equal(await c.get("k"), "old");
    const st = { ...c.subscriber.stats };
    await admin.call("CLIENT", "KILL", "TYPE", "pubsub");
    await admin.set("k", "new"); // not announced
    await waitFor("the loss to be counted", lost.slack_ms, () => c.subscriber.stats.lost > st.lost);
    assert.equal(await c.get("k"), "new", "a copy from before the loss was served");
    await waitFor("the reconnect and its resync", again.bound_ms! + again.slack_ms,
      () => c.subscriber.stats.connects > st.connects && c.subscriber.stats.resyncs > st.resyncs);
    await announce(admin, ns, "k2", 60_000);
    await waitFor("announcements followed again", 5000, () => c.hotSet.getText("k2") !== undefined);
    await c.close();
  } finally {
    await srv.stop();
  }
});

test("a stopped daemon: hot keys expire by their TTL", async () => {
  const sc = scenario("daemon_stopped");
  const srv = await startRedis();
  try {
    const admin = srv.client();
    const ns = new Namespace("fd");
    const c = await new HotCache(srv.client(), { namespace: ns, demandIntervalMs: 0 }).start();
    await admin.set("k", "old");
    await announce(admin, ns, "k", sc.test_ttl_ms!); // and then the daemon says nothing
    await waitFor("hot", 5000, () => c.hotSet.getText("k") !== undefined);
    assert.equal(await c.get("k"), "old");
    const t0 = Date.now();
    await admin.set("k", "new"); // not announced
    await waitFor("the key to expire", sc.test_ttl_ms! + sc.slack_ms, () => c.hotSet.getText("k") === undefined);
    assert.equal(await c.get("k"), "new");
    assert.ok(Date.now() - t0 <= sc.test_ttl_ms! + sc.slack_ms);
    const last = c.subscriber.stats.lastNotificationMs;
    assert.ok(last > 0 && Date.now() - last >= sc.test_ttl_ms!, "the stats do not show the daemon's silence");
    await c.close();
  } finally {
    await srv.stop();
  }
});
