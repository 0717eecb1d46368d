// The shared conformance vectors (spec/vectors; format in spec/README.md).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  buildDemandReports, decodeInvalidation, decodeKey, decodeMessage, encodeInvalidation, encodeKey,
  keyBytes, MAX_DEPTH, MAX_SEQ, MessageAuth, murmur3, Namespace, partitionFor, shardOf, SHARD_SEED, Subscriber, WireError, type Key, type RedisLike, type WireKey,
} from "../src/index.js";

const SPEC = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "spec", "vectors");
const load = (name: string) => JSON.parse(readFileSync(join(SPEC, name), "utf8"));

test("keys.json", () => {
  // Integers beyond 2^53 lose digits in JSON.parse: read them as text.
  const raw = readFileSync(join(SPEC, "keys.json"), "utf8").replace(/("value":\s*)(-?\d{16,})/g, '$1"$2"');
  const v = JSON.parse(raw);
  assert.ok(v.encode.length > 0);
  for (const c of v.encode) {
    const i = c.input;
    const key =
      i.type === "str" ? i.value
      : i.type === "int" ? BigInt(String(i.value))
      : i.type === "float" ? Number(i.value)
      : i.type === "bytes" ? Buffer.from(i.hex, "hex")
      : i.value;
    if (c.error) {
      assert.throws(() => keyBytes(key), `${c.name}: accepted`);
      continue;
    }
    const b = keyBytes(key);
    assert.equal(b.toString("hex"), c.bytes_hex, c.name);
    assert.deepEqual({ ...encodeKey(b) }, c.wire, c.name);
  }
  for (const c of v.decode) {
    if (c.error) assert.throws(() => decodeKey(c.wire), c.name);
    else assert.equal(decodeKey(c.wire).toString("hex"), c.bytes_hex, c.name);
  }
});

test("keys.json: large ints keep every digit", () => {
  assert.equal(keyBytes(9007199254740993n).toString(), "9007199254740993");
});

test("partition.json", () => {
  const v = load("partition.json");
  const keyOf = (c: { key?: string; enc?: string; key_hex?: string }) =>
    c.key_hex !== undefined ? Buffer.from(c.key_hex, "hex") : decodeKey({ key: c.key, enc: c.enc });
  for (const c of v.reporter.cases) {
    const k = keyOf(c);
    assert.equal(murmur3(k, 0), c.murmur3);
    for (const [n, p] of Object.entries(c.partition)) assert.equal(partitionFor(k, Number(n)), p);
  }
  for (const c of v.sharded.cases) {
    const k = keyOf(c);
    assert.equal(murmur3(k, SHARD_SEED), c.murmur3);
    for (const [n, s] of Object.entries(c.shard)) assert.equal(shardOf(k, Number(n)), s);
  }
});

test("invalidation.json", () => {
  const v = load("invalidation.json");
  for (const c of v.decode) {
    if (c.error) {
      assert.throws(() => decodeInvalidation(c.payload), c.name);
      continue;
    }
    const { origin, keys } = decodeInvalidation(c.payload);
    assert.equal(origin, c.origin, c.name);
    assert.deepEqual(keys.map((k) => k.toString("hex")), c.drops.map((d: WireKey) => decodeKey(d).toString("hex")), c.name);
  }
  for (const c of v.encode) {
    const keys = c.keys_hex.map((h: string) => Buffer.from(h, "hex"));
    assert.deepEqual(JSON.parse(encodeInvalidation(c.origin, keys)), c.json, c.name);
  }
});

const entrySet = (entries: Record<string, unknown>[]) =>
  new Map(entries.map((e) => [`${e.db ?? 0}/${decodeKey(e).toString("hex")}`, e.n]));

test("demand.json", () => {
  const v = load("demand.json");
  for (const c of v.cases) {
    const reads = c.reads.map((r: { key_hex: string; db: number; n: number; instance: string }) => ({
      bytes: Buffer.from(r.key_hex, "hex"), db: r.db, n: r.n, instance: r.instance,
    }));
    const reps = buildDemandReports(c.app, c.seq, c.ts, c.interval_ms, reads);
    assert.equal(reps.length, Object.keys(c.messages).length, c.name);
    for (const r of reps) {
      const got = JSON.parse(r.payload);
      const want = c.messages[r.instance];
      assert.equal(got.seq, r.seq);
      assert.deepEqual(entrySet(got.entries), entrySet(want.entries), c.name);
      const strip = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([k]) => k !== "entries" && k !== "seq"));
      assert.deepEqual(strip(got), strip(want), c.name);
      assert.equal(r.dropped, c.dropped[r.instance], c.name);
    }
    if (c.seqs) assert.deepEqual(reps.map((r) => r.seq).sort((a, b) => a - b), [...c.seqs].sort((a: number, b: number) => a - b), c.name);
  }
});

/**
 * A pretend Redis for the subscriber: the snapshot each instance keeps, served by the two
 * commands the subscriber reads snapshots with.
 */
function snapshotStore(store: Map<string, unknown>, ns: Namespace): RedisLike {
  const prefix = ns.snapshot("");
  return {
    zrangebyscore: async () => [...store.keys()].sort(),
    getBuffer: async (key: string) => {
      const data = key.startsWith(prefix) ? store.get(key.slice(prefix.length)) : undefined;
      return data === undefined ? null : Buffer.from(JSON.stringify(data));
    },
  } as unknown as RedisLike;
}

/**
 * Feed a file in the hotset.json format through the subscriber's own entry points: the
 * message handler a live subscription calls, and its bootstrap. The outcome is read from
 * the subscriber's counters.
 */
async function runHotSetVectors(file: string): Promise<void> {
  const v = load(file);
  assert.ok(v.cases.length > 0);
  for (const c of v.cases) {
    if (c.skip?.node) continue;
    let now = v.start_ms;
    let became: Key[] = [];
    let cooled: Key[] = [];
    const store = new Map<string, unknown>();
    const ns = new Namespace();
    const sub = new Subscriber(snapshotStore(store, ns), {
      namespace: ns,
      hotSet: { clock: { now: () => now } },
      wallClock: () => v.now_s * 1000 + (now - v.start_ms),
    });
    const hs = sub.hotSet;
    hs.addListener({ onHot: (e) => became.push(e), onCool: (k) => cooled.push(k) });
    for (const [i, s] of (c.steps as Record<string, any>[]).entries()) {
      became = [];
      cooled = [];
      let outcome = "";
      const where = `${c.name} step ${i}`;
      const before = { ...sub.stats };
      if (s.op === "snapshot") store.set(s.data.instance, s.data);
      else if (s.op === "bootstrap") await sub.bootstrap();
      else if (s.op === "advance") {
        now += s.ms;
        hs.expire();
      } else if (s.op === "message") {
        let payload = Buffer.from(s.raw ?? JSON.stringify(s.data));
        if (s.pad_to > payload.length) payload = Buffer.concat([payload, Buffer.alloc(s.pad_to - payload.length, " ")]);
        await sub.handleMessage(ns.eventsChannel, payload);
        const after = sub.stats;
        outcome =
          after.badMessages > before.badMessages ? "bad"
          : after.suspect > before.suspect ? "suspect"
          : after.gaps > before.gaps ? "resynced"
          : after.applied > before.applied ? "applied"
          : after.stale > before.stale ? "stale"
          : after.refused > before.refused ? "refused"
          : "";
        assert.equal(after.badEntries - before.badEntries, s.skipped ?? 0, `${where}: skipped`);
      } else assert.fail(`${where}: unknown op ${s.op}`);
      if (s.outcome) assert.equal(outcome, s.outcome, where);
      const withDb = (ks: Key[]) => ks.map((k) => `${k.db}/${k.bytes.toString("hex")}`).sort();
      const bytesOnly = (ks: Key[]) => ks.map((k) => k.bytes.toString("hex")).sort();
      const want = (ws: WireKey[]) => ws.map((w) => ({ bytes: decodeKey(w), db: w.db ?? 0 }));
      if (s.hot) assert.deepEqual(withDb(hs.keys()), withDb(want(s.hot)), `${where}: hot`);
      if (s.became_hot) assert.deepEqual(bytesOnly(became), bytesOnly(want(s.became_hot)), `${where}: became_hot`);
      if (s.cooled) assert.deepEqual(bytesOnly(cooled), bytesOnly(want(s.cooled)), `${where}: cooled`);
    }
  }
}

test("hotset.json", () => runHotSetVectors("hotset.json"));

test("limits.json: the hot-set cases, through the same runner", () => runHotSetVectors("limits.json"));

test("limits.json: the signing key's minimum length", () => {
  const v = load("limits.json");
  assert.ok(v.auth.length > 0);
  for (const c of v.auth) {
    if (c.error) assert.throws(() => new MessageAuth([c.key_utf8]), `key of ${c.key_utf8.length} bytes`);
    else new MessageAuth([c.key_utf8]);
  }
});

test("namespace.json", () => {
  const v = load("namespace.json");
  assert.ok(v.cases.length > 0);
  for (const c of v.cases) {
    const ns = new Namespace(c.prefix ?? undefined, c.channel ?? undefined);
    const got = {
      events: ns.eventsChannel, invalidate: ns.invalidateChannel, demand: ns.demandChannel(c.instance),
      instances: ns.instances, snapshot: ns.snapshot(c.instance),
    };
    for (const [what, name] of Object.entries(got)) assert.equal(name, c.names[what], `${c.name}: ${what}`);
  }
});

test("auth.json", () => {
  const v = load("auth.json");
  const auth = new MessageAuth([v.key_utf8]);
  assert.ok(v.sign.length > 0 && v.reject.length > 0);
  for (const c of v.sign) {
    assert.equal(auth.sign(Buffer.from(c.body)).toString(), c.signed, c.name);
    assert.equal(auth.verify(Buffer.from(c.signed))?.toString(), c.body, c.name);
  }
  for (const c of v.reject) assert.equal(auth.verify(Buffer.from(c.signed)), undefined, c.name);
});

test("demand reports stay under 128 KiB with long keys, the heaviest kept", () => {
  const reads = [];
  let total = 0;
  for (let i = 0; i < 1000; i++) { // 1,000 binary keys of 1 KiB: ~1.4 MB as base64
    const bytes = Buffer.alloc(1024, 0xff);
    bytes[0] = i >> 8;
    bytes[1] = i & 0xff;
    reads.push({ bytes, db: 0, n: 10_000 + i, instance: "d1" });
    total += 10_000 + i;
  }
  const [rep] = buildDemandReports("app", 1, 0, 250, reads);
  assert.ok(Buffer.byteLength(rep.payload) <= 128 << 10, `payload ${Buffer.byteLength(rep.payload)}`);
  const entries = JSON.parse(rep.payload).entries as { n: number }[];
  assert.equal(entries.length, rep.entries);
  assert.ok(rep.entries >= 50 && rep.entries < 1000, `entries ${rep.entries}`); // ~90 fit
  const sent = entries.reduce((s, e) => s + e.n, 0);
  assert.equal(sent + rep.dropped, total);
  assert.equal(Math.min(...entries.map((e) => e.n)), 10_000 + 1000 - rep.entries);
});

test("hostile.json", () => {
  const v = load("hostile.json");
  assert.equal(v.max_depth, MAX_DEPTH);
  assert.equal(v.max_seq, MAX_SEQ);
  let ran = 0;
  for (const c of v.cases) {
    const data = c.input_base64 !== undefined ? Buffer.from(c.input_base64, "base64")
      : c.gen !== undefined ? Buffer.from(c.gen.prefix + c.gen.open.repeat(c.gen.times) + c.gen.close.repeat(c.gen.times) + c.gen.suffix)
      : Buffer.from(c.input, "utf8");
    const decode = c.decoder === "notification" ? decodeMessage : c.decoder === "invalidation" ? decodeInvalidation : undefined;
    if (decode === undefined) continue; // the Node client sends demand reports, it does not read them
    ran++;
    if (c.valid) decode(data);
    else assert.throws(() => decode(data), WireError, c.name);
  }
  assert.ok(ran > 0);
});
