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
await cache.close();
await srv.stop();
