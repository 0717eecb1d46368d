// spec/vectors/watch.json through the objects a HotCache feeds every heartbeat and
// invalidation through (WatchLeases, InvalidationIntake).
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { decodeHeartbeat, InvalidationIntake, MessageAuth, WATCH_LEASE_MS, WatchLeases, type Guard } from "../src/index.js";

const SPEC = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "spec", "vectors");
const load = (name: string) => JSON.parse(readFileSync(join(SPEC, name), "utf8"));
const V = load("watch.json");

test("watch.json: decode", () => {
  assert.equal(V.lease_ms, WATCH_LEASE_MS);
  for (const c of V.decode) {
    if (!c.ok) {
      assert.throws(() => decodeHeartbeat(Buffer.from(c.payload), V.now_s), `${c.name}: accepted`);
      continue;
    }
    const hb = decodeHeartbeat(Buffer.from(c.payload), V.now_s);
    const w = c.heartbeat;
    assert.deepEqual([hb.instance, hb.node, hb.epoch, hb.up, hb.armed, hb.slots], [w.instance, w.node, w.epoch, w.up, w.armed, w.slots], c.name);
  }
});

test("watch.json: leases", () => {
  for (const c of V.leases) {
    const w = new WatchLeases();
    let g: Guard | null = null;
    for (const st of c.steps) {
      const now = st.at_ms;
      if (st.heartbeat) {
        const hb = decodeHeartbeat(Buffer.from(JSON.stringify({ v: 1, ts: V.now_s, ...st.heartbeat })), V.now_s);
        assert.equal(w.heard(hb, now), st.epoch_changed, `${c.name} at ${now}`);
      } else if (st.guard) {
        g = w.guard(st.guard.slot, st.guard.hot, now);
        assert.deepEqual(g, st.expect, `${c.name} at ${now}`);
      } else if (st.serve) {
        assert.equal(w.serves(g, st.serve.slot, now), st.expect, `${c.name} at ${now}`);
      } else if (st.forget) {
        w.forget();
      }
    }
  }
});

function gen(g: { bytes?: number; keys?: number }): Buffer {
  if (g.bytes !== undefined) {
    const head = '{"v":1,"origin":"', tail = '","keys":[{"key":"x"}]}';
    return Buffer.from(head + "o".repeat(g.bytes - head.length - tail.length) + tail);
  }
  const keys = Array.from({ length: g.keys! }, (_, i) => `{"key":"k${i}"}`).join(",");
  return Buffer.from(`{"v":1,"origin":"o","keys":[${keys}]}`);
}

test("watch.json: intake", () => {
  const key = Buffer.from(load("auth.json").key_utf8, "utf8");
  for (const c of V.intake) {
    const intake = new InvalidationIntake(c.auth ? new MessageAuth([key]) : undefined);
    const got = intake.receive(c.gen ? gen(c.gen) : Buffer.from(c.payload, "utf8"), 0);
    const s = intake.stats;
    if (c.outcome === "applied") {
      assert.ok(got !== undefined && s.oversized + s.unsigned + s.bad === 0, c.name);
      if (c.drops_count !== undefined) assert.equal(got!.length, c.drops_count, c.name);
      else assert.deepEqual(got!.map((k) => k.toString("utf8")), c.drops, c.name);
    } else {
      assert.equal(got, undefined, c.name);
      assert.equal((s as unknown as Record<string, number>)[c.outcome], 1, c.name);
    }
  }
});

test("watch.json: ratelimit", () => {
  const inval = Buffer.from('{"v":1,"origin":"o","keys":[{"key":"k"}]}');
  for (const c of V.ratelimit) {
    const intake = new InvalidationIntake();
    const applied: number[] = [];
    for (const [kind, t] of c.events) {
      if (kind === "inval") {
        if (intake.receive(inval, t)?.length === 1) applied.push(t);
      } else if (intake.due(Buffer.from("k").toString("latin1"), t)) applied.push(t);
    }
    assert.deepEqual(applied, c.applied_ms, c.name);
  }
});
