import assert from "node:assert/strict";
import { test } from "node:test";
import { Redis } from "ioredis";
import { Namespace, Subscriber } from "../src/index.js";
import { FreezableProxy, startRedis, waitFor } from "./helpers.js";

test("a subscription whose path stops forwarding without closing is noticed by PING and replaced", async () => {
  const srv = await startRedis();
  const direct = srv.client();
  const proxy = await new FreezableProxy(srv.port).listen();
  const client = new Redis({ port: proxy.port, host: "127.0.0.1" });
  client.on("error", () => {});
  const ns = new Namespace("halfopen");
  const sub = new Subscriber(client, { namespace: ns, healthIntervalMs: 300 });
  await sub.start();
  try {
    proxy.frozen = true;
    const frozenAt = Date.now();
    await waitFor("the half-open subscription to be noticed", 10_000, () => sub.stats.halfOpen > 0);
    console.log(`half-open subscription noticed after ${Date.now() - frozenAt} ms`);
    const connects = sub.stats.connects;
    proxy.frozen = false;
    await waitFor("a fresh subscription once the path heals", 15_000, () => sub.stats.connects > connects);
    const msg = JSON.stringify({
      v: 1, instance: "d1", seq: 1, ts: Date.now() / 1000, full: false, final: false, cool: [],
      hot: [{ key: "k", rate: 5, rule: "r", ttl_ms: 5000, since: 0 }],
    });
    await waitFor("the new subscription to receive messages", 10_000, async () => {
      await direct.publish(ns.eventsChannel, msg);
      await new Promise((r) => setTimeout(r, 50));
      return sub.hotSet.getText("k") !== undefined;
    });
    assert.ok(sub.stats.halfOpen >= 1);
  } finally {
    await sub.close();
    client.disconnect();
    await proxy.close();
    await srv.stop();
  }
});
