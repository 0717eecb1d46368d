// The Node stale-read app: reads hot keys through HotCache as a service would. Protocol:
// tests/stale/apps/reader.py. process.hrtime.bigint() is CLOCK_MONOTONIC on Linux (libuv),
// the clock the other languages' readers and the writers use.
import { createRequire } from "node:module";
import { createWriteStream } from "node:fs";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { fileURLToPath, pathToFileURL } from "node:url";
import path from "node:path";

const nodeDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../../clients/node");
const { Cluster, Redis } = createRequire(path.join(nodeDir, "package.json"))("ioredis");
const { HotCache, Namespace } = await import(pathToFileURL(path.join(nodeDir, "dist/src/index.js")).href);

const { values: a } = parseArgs({
  options: {
    url: { type: "string", default: "" },
    cluster: { type: "string", default: "" },
    keys: { type: "string" },
    flash: { type: "string", default: "" },
    rate: { type: "string", default: "2000" },
    "cold-keys": { type: "string", default: "0" },
    namespace: { type: "string", default: "hotkeyd" },
    mode: { type: "string", default: "available" },
    sharded: { type: "boolean", default: false },
    log: { type: "string" },
  },
});
const client = a.cluster
  ? new Cluster(a.cluster.split(",").map((hp) => ({ host: hp.split(":")[0], port: Number(hp.split(":")[1]) })))
  : new Redis(a.url);
const opts = { namespace: new Namespace(a.namespace), sharded: a.sharded };
if (a.mode === "strict") opts.consistency = "strict"; // the SDK option of issue 25 (strict mode)
const cache = await new HotCache(client, opts).start();
const keys = a.keys.split(",");
let [flash, f0, f1] = ["", 0n, 0n];
if (a.flash) {
  const p = a.flash.split(",");
  [flash, f0, f1] = [p[0], BigInt(p[1]), BigInt(p[2])];
}
let stopped = false;
const rl = createInterface({ input: process.stdin });
rl.on("line", (line) => {
  if (line.trim() === "stop") stopped = true;
});
rl.on("close", () => (stopped = true));
const out = createWriteStream(a.log);
const genOf = (v) => {
  if (v === null || v === undefined) return -1;
  const m = /^g:(\d+)(:|$)/.exec(v);
  return m ? Number(m[1]) : -2;
};
process.stdout.write(JSON.stringify({ event: "ready", lang: "node" }) + "\n");
const intervalMs = 1000 / Number(a.rate);
const cold = Number(a["cold-keys"]);
const n = keys.length;
let next = performance.now();
let reads = 0;
let errors = 0;
let buf = [];
for (let i = 0; !stopped; i++) {
  const t0 = process.hrtime.bigint();
  let idx = i % (n + 1);
  if (idx === n && !(flash && f0 <= t0 && t0 < f1)) idx = i % n;
  const key = idx < n ? keys[idx] : flash;
  const before = cache.stats.hits + cache.stats.staleHits;
  let g;
  try {
    g = genOf(await cache.get(key));
  } catch {
    errors++;
    g = -2;
  }
  const t1 = process.hrtime.bigint();
  const local = cache.stats.hits + cache.stats.staleHits > before ? 1 : 0;
  buf.push(`${idx} ${g} ${t0} ${t1} ${local}\n`);
  reads++;
  if (cold > 0 && i % 20 === 0) await cache.get(`cold:${(i / 20) % cold}`).catch(() => errors++);
  if (buf.length >= 1000) {
    out.write(buf.join(""));
    buf = [];
  }
  next += intervalMs;
  const d = next - performance.now();
  if (d > 0.5) await new Promise((r) => setTimeout(r, d));
  else if (d < -1000) next = performance.now();
  else if (i % 20 === 0) await new Promise((r) => setImmediate(r)); // let pub/sub messages in
}
out.write(buf.join(""));
await new Promise((r) => out.end(r));
const s = cache.stats;
process.stdout.write(JSON.stringify({ event: "done", lang: "node", reads, errors, local_hits: s.hits + s.staleHits }) + "\n");
await cache.close();
client.disconnect();
rl.close();
// Nothing should keep the process alive now. Once in CI (a loaded box, after a CLUSTER
// FAILOVER) a cluster reader did not exit by itself: if it is still up in 3 s, write what
// holds it (the harness prints it with the report) and exit, as an app's shutdown would.
setTimeout(() => {
  const held = process._getActiveHandles().map((h) => {
    const name = h?.constructor?.name ?? typeof h;
    return h?.remotePort ? `${name} ${h.localPort}->${h.remotePort} ${h.readyState ?? ""}` : name;
  });
  process.stderr.write(`still running 3 s after close(): ${JSON.stringify(held)} ${JSON.stringify(process.getActiveResourcesInfo())}\n`);
  process.exit(0);
}, 3000).unref();
