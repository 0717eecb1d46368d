// readapp: reads one key through HotCache at a steady rate, as a service would. The
// cross-language end-to-end tests (tests/interop) run it beside the other languages'
// versions against a real daemon. Protocol: see clients/go/examples/readapp.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { Cluster, Redis } from "ioredis";
import { HotCache, Namespace, type Consistency } from "../src/index.js";

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: "" },
    cluster: { type: "string", default: "" },
    key: { type: "string", default: "product:1" },
    rate: { type: "string", default: "1000" },
    "cold-keys": { type: "string", default: "0" },
    namespace: { type: "string", default: "hotkeyd" },
    seconds: { type: "string", default: "3600" },
    sharded: { type: "boolean", default: false },
    consistency: { type: "string", default: "available" },
  },
});
// Every line carries when it happened (unix ms), so the test measures in the apps' clock.
const emit = (o: Record<string, unknown>) =>
  process.stdout.write(JSON.stringify({ ...o, t: performance.timeOrigin + performance.now() }) + "\n");

const client = a.cluster
  ? new Cluster(a.cluster.split(",").map((hp) => ({ host: hp.split(":")[0], port: Number(hp.split(":")[1]) })))
  : new Redis(a.url);
const cache = await new HotCache(client, {
  namespace: new Namespace(a.namespace), sharded: a.sharded, consistency: a.consistency as Consistency,
}).start();
emit({ event: "ready", lang: "node", origin: cache.origin });

let stopped = false;
const rl = createInterface({ input: process.stdin });
rl.on("line", async (line) => {
  if (line.startsWith("set ")) {
    const v = line.slice(4);
    try {
      await cache.set(a.key, v);
      emit({ event: "wrote", value: v });
    } catch (e) {
      emit({ event: "error", error: String(e) });
    }
  } else if (line === "stop") stopped = true;
});
rl.on("close", () => (stopped = true));

const intervalMs = 1000 / Number(a.rate);
const cold = Number(a["cold-keys"]);
const end = Date.now() + Number(a.seconds) * 1000;
let next = performance.now();
let lastStats = Date.now();
let reads = 0;
let errors = 0;
let last: string | null | undefined = undefined;
let prevT = 0; // when the previous read (still the old value) returned (unix ms)
let misses = 0;
let missing = false;
for (let i = 0; !stopped && Date.now() < end; i++) {
  try {
    const v = await cache.get(a.key);
    const nowT = performance.timeOrigin + performance.now();
    if (a.consistency === "strict") {
      // {"event":"source","local":...} when strict mode switches between local copies and Redis
      const m = cache.watchStats.strictMisses;
      const miss = m > misses;
      if (i === 0 || miss !== missing) emit({ event: "source", local: !miss });
      missing = miss;
      misses = m;
    }
    if (v !== last) {
      last = v;
      emit({ event: "value", value: v, prev_t: prevT });
    }
    prevT = nowT;
  } catch {
    errors++;
  }
  reads++;
  if (cold > 0 && i % 20 === 0) await cache.get(`cold:${(i / 20) % cold}`).catch(() => errors++);
  if (Date.now() - lastStats >= 1000) {
    lastStats = Date.now();
    const s = cache.stats;
    emit({ event: "stats", reads, errors, hot: cache.hotSet.getText(a.key) !== undefined, local_hits: s.hits + s.staleHits,
      demand: { reports: s.demandReports, entries: s.demandEntries, send_errors: s.demandSendErrors },
      lapsed: cache.watchStats.lapsed, strict_misses: cache.watchStats.strictMisses });
  }
  next += intervalMs;
  const d = next - performance.now();
  if (d > 1) await new Promise((r) => setTimeout(r, d));
  else if (d < -1000) next = performance.now();
  else if (i % 50 === 0) await new Promise((r) => setImmediate(r)); // let pub/sub messages in
}
const s = cache.stats;
emit({ event: "done", reads, errors, local_hits: s.hits + s.staleHits });
await cache.close();
client.disconnect();
rl.close();
