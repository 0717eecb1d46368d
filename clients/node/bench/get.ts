// Hot HotCache.get against an ioredis GET on loopback, and the cold-path overhead, in one
// run (mitata). `npm run bench`; needs redis-server on PATH.
import { bench, group, run, summary } from "mitata";
import { HotCache, Namespace } from "../src/index.js";
import { startRedis, waitFor } from "../test/helpers.js";

const srv = await startRedis();
const admin = srv.client();
const client = srv.client();
await admin.set("hot", "value-of-some-length-0123456789");
await admin.set("cold", "value-of-some-length-0123456789");
const ns = new Namespace("bench");
const cache = await new HotCache(srv.client(), { namespace: ns }).start();
await admin.publish(ns.eventsChannel, JSON.stringify({
  v: 1, instance: "d", seq: 1, ts: 1, full: true, final: false, cool: [],
  hot: [{ key: "hot", rate: 1, rule: "r", ttl_ms: 600_000, since: 0 }],
}));
await waitFor("hot", 5000, () => cache.hotSet.getText("hot") !== undefined);
await cache.get("hot");

summary(() => {
  group("GET of a hot key", () => {
    bench("HotCache.get (hot, local)", async () => cache.get("hot"));
    bench("ioredis GET (loopback)", async () => client.get("hot"));
  });
  group("GET of a cold key", () => {
    bench("HotCache.get (cold)", async () => cache.get("cold"));
    bench("ioredis GET (cold)", async () => client.get("cold"));
  });
});
await run();

// Interleaved rounds (what the README quotes): each round times hot cache reads, cold
// cache reads and plain ioredis GETs back to back, so machine noise hits all three alike.
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const hotNs: number[] = [];
const coldNs: number[] = [];
const getNs: number[] = [];
for (let round = 0; round < 30; round++) {
  let t = process.hrtime.bigint();
  for (let i = 0; i < 2000; i++) await cache.get("hot");
  hotNs.push(Number(process.hrtime.bigint() - t) / 2000);
  t = process.hrtime.bigint();
  for (let i = 0; i < 200; i++) await cache.get("cold");
  coldNs.push(Number(process.hrtime.bigint() - t) / 200);
  t = process.hrtime.bigint();
  for (let i = 0; i < 200; i++) await client.get("cold");
  getNs.push(Number(process.hrtime.bigint() - t) / 200);
}
const [h, c, g] = [median(hotNs), median(coldNs), median(getNs)];
console.log(
  `interleaved medians over 30 rounds: hot HotCache.get ${h.toFixed(0)} ns, cold HotCache.get ${(c / 1000).toFixed(1)} us, ` +
    `ioredis GET ${(g / 1000).toFixed(1)} us: hot ${(g / h).toFixed(0)}x faster, cold path ${((c / g - 1) * 100).toFixed(1)} % overhead`,
);
await cache.close();
await srv.stop();
