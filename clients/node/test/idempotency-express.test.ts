// The idempotency middleware in a real Express app, with express.json() mounted after it.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import type { Server } from "node:http";
import express from "express";
import { idempotency, IdempotencyGuard, REPLAYED_HEADER, type GuardedRequest } from "../src/index.js";
import { startRedis, type RedisServer } from "./helpers.js";

let srv: RedisServer;
before(async () => {
  srv = await startRedis();
});
after(async () => {
  await srv.stop();
});

test("express: JSON bodies, replay, 422, a thrown handler releases the key, a slow one keeps it", async () => {
  const guard = new IdempotencyGuard(srv.client(), { leaseMs: 300, ttlMs: 60_000 });
  const app = express();
  app.use(idempotency(guard, { user: (req) => String(req.headers["x-user"] ?? "") }));
  app.use(express.json()); // after the guard: it sees the body already read and skips
  let runs = 0;
  let throws = 0;
  app.post("/order", async (req, res) => {
    runs++;
    const r = req as unknown as GuardedRequest;
    if (req.body.slow) await new Promise((ok) => setTimeout(ok, 1000));
    if (req.body.fail && ++throws === 1) throw new Error("downstream timeout");
    res.status(201).json({ run: runs, sku: req.body.sku, fenced: (r.idempotencyLease?.token ?? 0n) > 0n });
  });
  const server: Server = await new Promise((ok) => {
    const s = app.listen(0, "127.0.0.1", () => ok(s));
  });
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}/order`;
  const post = (key: string, body: object, user = "alice") =>
    fetch(url, { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json", "Idempotency-Key": key, "x-user": user } });
  try {
    const r1 = await post("k1", { sku: 42 });
    const b1 = await r1.json();
    assert.equal(r1.status, 201);
    assert.deepEqual(b1, { run: 1, sku: 42, fenced: true });
    const r2 = await post("k1", { sku: 42 });
    assert.equal(r2.headers.get(REPLAYED_HEADER), "true");
    assert.deepEqual(await r2.json(), b1);
    assert.equal((await post("k1", { sku: 43 })).status, 422);
    const bob = await post("k1", { sku: 42 }, "bob"); // another user's key space
    assert.equal(bob.status, 201);
    assert.equal((await bob.json()).run, 2);

    assert.equal((await post("k2", { fail: true })).status, 500);
    assert.equal((await post("k2", { fail: true })).status, 201, "a thrown handler released the key");

    const before = runs;
    const first = post("k3", { slow: true });
    await new Promise((ok) => setTimeout(ok, 500)); // past the 300 ms lease: renewed
    const busy = await post("k3", { slow: true });
    assert.equal(busy.status, 409);
    assert.equal(busy.headers.get("retry-after"), "1");
    assert.equal((await first).status, 201);
    assert.equal(runs, before + 1);
  } finally {
    await new Promise((ok) => server.close(ok));
  }
});
