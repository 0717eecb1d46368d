// HotCache against a real redis-server. The daemon's part is played by publishing its
// wire messages (docs/wire-format.md); the cross-language test in tests/interop runs the
// real daemon.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Redis } from "ioredis";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { HotCache, MessageAuth, Namespace, ShardedCounter } from "../src/index.js";
import { commandCalls, startRedis, startRedisOn, waitFor, type RedisServer } from "./helpers.js";

let srv: RedisServer;
let admin: Redis;

before(async () => {
  srv = await startRedis();
  admin = srv.client();
});
after(async () => srv.stop());

let seq = 0;
async function announce(ns: Namespace, instance: string, key: string, ttlMs = 60_000): Promise<void> {
  seq++;
  await admin.publish(ns.eventsChannel, JSON.stringify({
    v: 1, instance, seq, ts: Date.now() / 1000, full: false, final: false, cool: [],
    hot: [{ key, rate: 5000, rule: "default", ttl_ms: ttlMs, since: 0 }],
  }));
}

async function cache(ns: Namespace, demandIntervalMs = 250): Promise<HotCache> {
  return new HotCache(srv.client(), { namespace: ns, demandIntervalMs }).start();
}

test("a hot key is served locally, and the daemon hears of the reads", async () => {
  const ns = new Namespace("n1");
  await admin.set("product:1", "v1");
  const c = await cache(ns, 50);
  const sub = srv.client();
  let reported = 0;
  sub.on("message", (_ch: string, payload: string) => {
    const rep = JSON.parse(payload);
    assert.equal(rep.type, "demand");
    assert.equal(rep.app, c.origin);
    for (const e of rep.entries) {
      assert.equal(e.key, "product:1");
      reported += e.n;
    }
  });
  await sub.subscribe(ns.demandChannel("d1"));
  seq = 0;
  let before = await commandCalls(admin, "get");
  for (let i = 0; i < 100; i++) assert.equal(await c.get("product:1"), "v1");
  assert.equal((await commandCalls(admin, "get")) - before, 100, "cold reads reach Redis");

  await announce(ns, "d1", "product:1");
  await waitFor("hot", 5000, () => c.hotSet.getText("product:1") !== undefined);
  before = await commandCalls(admin, "get");
  for (let i = 0; i < 1000; i++) assert.equal(await c.get("product:1"), "v1");
  assert.ok((await commandCalls(admin, "get")) - before <= 1, "hot reads stay local");
  await waitFor("the demand reports", 5000, () => reported >= 999);
  assert.ok(reported <= 1000, `reported ${reported}`);
  await c.close();
});

test("demand reports are signed with the reporter key of HOTKEYD_DEMAND_KEY_FILE", async () => {
  const dir = mkdtempSync(join(tmpdir(), "hotkeyd-"));
  writeFileSync(join(dir, "demand.key"), "reporter-key-0123456789\nold-reporter-key-0123456789\n");
  const env = { HOTKEYD_DEMAND_KEY_FILE: join(dir, "demand.key"), HOTKEYD_DEMAND_KEY: "ignored-key-0123456789" };
  const auth = MessageAuth.reporterKeyFromEnv(env)!;
  assert.equal(MessageAuth.reporterKeyFromEnv({}), undefined);
  const ns = new Namespace("n-signed");
  await admin.set("product:s", "v");
  const c = await new HotCache(srv.client(), { namespace: ns, demandIntervalMs: 50, demandAuth: auth }).start();
  const sub = srv.client();
  const got: Buffer[] = [];
  sub.on("messageBuffer", (_ch: Buffer, payload: Buffer) => got.push(payload));
  await sub.subscribe(ns.demandChannel("d1"));
  await announce(ns, "d1", "product:s");
  await waitFor("hot", 5000, () => c.hotSet.getText("product:s") !== undefined);
  for (let i = 0; i < 10; i++) await c.get("product:s");
  await waitFor("a demand report", 5000, () => got.length > 0);
  await c.close();
  await sub.quit();
  // the first key of the file signs: what the daemon's --demand-key-file verifies
  const body = new MessageAuth(["reporter-key-0123456789"]).verify(got[0]);
  assert.ok(body, `not signed with the file's first key: ${got[0]}`);
  assert.equal(JSON.parse(body.toString()).entries[0].key, "product:s");
  assert.equal(new MessageAuth(["ignored-key-0123456789"]).verify(got[0]), undefined);
});

test("a write through one cache invalidates the others", async () => {
  const ns = new Namespace("n2");
  await admin.set("k", "old");
  const a = await cache(ns);
  const b = await cache(ns);
  seq = 0;
  await announce(ns, "d", "k");
  for (const c of [a, b]) {
    await waitFor("hot", 5000, () => c.hotSet.getText("k") !== undefined);
    assert.equal(await c.get("k"), "old");
  }
  await a.set("k", "new");
  await waitFor("b sees the write", 2000, async () => (await b.get("k")) === "new");
  assert.equal(await a.get("k"), "new");
  await a.close();
  await b.close();
});

test("single flight: 100 concurrent readers, one GET", async () => {
  const ns = new Namespace("n3");
  await admin.set("sf", "v");
  const c = await cache(ns);
  seq = 0;
  await announce(ns, "d", "sf");
  await waitFor("hot", 5000, () => c.hotSet.getText("sf") !== undefined);
  const before = await commandCalls(admin, "get");
  const vals = await Promise.all(Array.from({ length: 100 }, () => c.get("sf")));
  assert.ok(vals.every((v) => v === "v"));
  assert.equal((await commandCalls(admin, "get")) - before, 1);
  await c.close();
});

test("hashes, mget, missing keys and cached()", async () => {
  const ns = new Namespace("n4");
  await admin.hset("h", "a", "1", "b", "2");
  const c = await cache(ns);
  seq = 0;
  await announce(ns, "d", "h");
  await announce(ns, "d", "missing");
  await waitFor("hot", 5000, () => c.hotSet.size === 2);
  for (let i = 0; i < 3; i++) {
    assert.equal(await c.get("missing"), null);
    assert.equal(await c.hget("h", "b"), "2");
    const m = await c.hgetall("h");
    assert.deepEqual(m, { a: "1", b: "2" });
    m.a = "mutated";
  }
  assert.deepEqual(await c.mget("h", "missing", "nope"), [null, null, null]);
  let n = 0;
  const load = async () => `row${++n}`;
  assert.equal(await c.cached("h", load), "row1");
  assert.equal(await c.cached("h", load), "row1");
  assert.equal(await c.cached("cold", load), "row2");
  await c.close();
});

for (const spread of [false, true]) {
  test(`ShardedCounter never oversells, never falsely sells out (spread=${spread})`, async () => {
    const counter = new ShardedCounter(admin, `stock:node:${spread}`, { shards: 4, spread });
    await counter.setTotal(1000);
    let taken = 0;
    const worker = async (w: number) => {
      for (let i = 0; ; i++) {
        const amount = 1 + ((i + w) % 3);
        const left = await counter.take(`w${w}-${i}`, amount);
        if (left === null) {
          if (amount === 1) return;
          continue;
        }
        taken += amount;
      }
    };
    await Promise.all(Array.from({ length: 8 }, (_, w) => worker(w)));
    assert.equal(taken, 1000);
    assert.equal(await counter.value(), 0);
    await counter.clear();
  });
}

test("spread take gathers units from several shards", async () => {
  const c = new ShardedCounter(admin, "gather:node", { shards: 4, spread: true });
  await c.setTotal(4);
  assert.equal(await c.take("x", 2), 2);
  assert.equal(await c.take("y", 3), null);
  assert.equal(await c.value(), 2);
  await c.clear();
});

test("after a Redis restart the subscriber reconnects and drops copies it may not have seen invalidated", async () => {
  const own = await startRedis();
  const ns = new Namespace("restart");
  const old = own.client();
  await old.set("k", "old");
  const c = await new HotCache(own.client(), { namespace: ns }).start();
  await old.publish(ns.eventsChannel, JSON.stringify({
    v: 1, instance: "d", seq: 1, ts: Date.now() / 1000, full: false, final: false, cool: [],
    hot: [{ key: "k", rate: 1, rule: "r", ttl_ms: 60_000, since: 0 }],
  }));
  await waitFor("hot", 5000, () => c.hotSet.getText("k") !== undefined);
  assert.equal(await c.get("k"), "old");
  const before = c.subscriber.stats.connects;
  own.proc.kill("SIGKILL");
  await new Promise((r) => own.proc.once("exit", r));
  const again = await startRedisOn(own.port);
  const admin2 = again.client();
  await admin2.set("k", "new"); // no invalidation: the reconnect itself must drop the copy
  await waitFor("a reconnect", 20_000, () => c.subscriber.stats.connects > before);
  assert.equal(await c.get("k"), "new");
  await c.close();
  await own.stop();
  await again.stop();
});
