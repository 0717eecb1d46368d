// Property tests of the decoders (issue 23): whatever the bytes, decodeMessage and
// decodeInvalidation return a value or throw WireError (never another error), what they
// accept is well formed, keys round-trip, and demand reports stay strict JSON within the
// size cap. A fixed seed keeps CI deterministic (FC_SEED=<n> FC_RUNS=<n> explores more);
// spec/fuzz/wire.json (shared with Java) is replayed first on every run.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import {
  buildDemandReports, decodeInvalidation, decodeKey, decodeMessage, encodeKey, MAX_SEQ, WireError,
} from "../src/index.js";
import { MAX_DEMAND_BYTES, parseStrict } from "../src/wire.js";

const SEED = Number(process.env.FC_SEED ?? 23);
const RUNS = Number(process.env.FC_RUNS ?? 2000);
const CORPUS: Buffer[] = (
  JSON.parse(readFileSync(join(import.meta.dirname, "..", "..", "..", "..", "spec", "fuzz", "wire.json"), "utf8")) as { inputs: string[] }
).inputs.map((b) => Buffer.from(b, "base64"));

/** Decode; a WireError is a verdict, anything else thrown fails the property. */
function verdict<T>(fn: () => T): T | undefined {
  try {
    return fn();
  } catch (e) {
    if (e instanceof WireError) return undefined;
    throw e;
  }
}

function checkMessage(data: Buffer): void {
  const m = verdict(() => decodeMessage(data));
  if (m === undefined) return;
  assert.ok(m.instance.length > 0 && Number.isSafeInteger(m.seq) && m.seq >= 0 && m.seq <= MAX_SEQ, JSON.stringify(m));
  assert.ok(Number.isFinite(m.ts));
  for (const h of m.hot) assert.ok(h.ttlMs >= 0 && Number.isFinite(h.rate));
}

function checkInvalidation(data: Buffer): void {
  const inv = verdict(() => decodeInvalidation(data));
  if (inv === undefined) return;
  for (const k of inv.keys) assert.deepEqual(decodeKey(encodeKey(k)), k);
}

const envelope = fc.record({
  v: fc.oneof(fc.constant(1), fc.jsonValue()),
  instance: fc.oneof(fc.string({ minLength: 1 }), fc.jsonValue()),
  seq: fc.oneof(fc.nat(), fc.bigInt().map(String).map(Number), fc.jsonValue()),
  ts: fc.oneof(fc.double(), fc.jsonValue()),
  hot: fc.array(fc.record({ key: fc.string(), rate: fc.double(), rule: fc.string(), ttl_ms: fc.integer() }, { requiredKeys: [] })),
  cool: fc.jsonValue(),
}, { requiredKeys: [] });

test("the corpus replays through every decoder", () => {
  for (const data of CORPUS) {
    checkMessage(data);
    checkInvalidation(data);
  }
});

test("decodeMessage: any bytes are a message or a WireError", () => {
  fc.assert(fc.property(fc.uint8Array({ maxLength: 512 }), (b) => checkMessage(Buffer.from(b))), { seed: SEED, numRuns: RUNS });
});

test("decodeMessage: near-valid messages are a message or a WireError, and what passes is well formed", () => {
  fc.assert(fc.property(envelope, (o) => checkMessage(Buffer.from(JSON.stringify(o)))), { seed: SEED, numRuns: RUNS });
});

test("decodeInvalidation: any document is keys that round-trip or a WireError", () => {
  const inv = fc.record({ v: fc.constant(1), origin: fc.string(), keys: fc.array(fc.oneof(
    fc.record({ key: fc.string() }),
    fc.record({ key: fc.base64String(), enc: fc.constant("base64") }),
    fc.jsonValue(),
  )) });
  fc.assert(fc.property(inv, (o) => checkInvalidation(Buffer.from(JSON.stringify(o)))), { seed: SEED, numRuns: RUNS });
  fc.assert(fc.property(fc.uint8Array({ maxLength: 256 }), (b) => checkInvalidation(Buffer.from(b))), { seed: SEED, numRuns: RUNS });
});

test("demand reports: any key bytes and counts encode to strict JSON within the cap", () => {
  const read = fc.record({ bytes: fc.uint8Array({ maxLength: 300 }).map((b) => Buffer.from(b)), db: fc.nat(15), n: fc.integer({ min: 1, max: 2 ** 40 }) });
  fc.assert(fc.property(fc.string(), fc.array(read, { maxLength: 50 }), (app, reads) => {
    const reps = buildDemandReports(app || "a", 1, 1764480000.25, 250, reads.map((r) => ({ ...r, instance: "d1" })));
    for (const r of reps) {
      assert.ok(Buffer.byteLength(r.payload) <= MAX_DEMAND_BYTES);
      const doc = parseStrict(r.payload, "demand report") as { entries: { key: string; enc?: string; n: number }[] };
      for (const e of doc.entries) assert.ok(Number.isSafeInteger(e.n) && e.n >= 1 && e.n <= 2 ** 32 - 1, String(e.n));
    }
  }), { seed: SEED, numRuns: Math.ceil(RUNS / 4) });
});
