// The HTTP middleware's parity with the other languages: spec/vectors/idempotency.json's
// "http" section, and the caller scope, transition window, problems, comma-joined keys and
// Retry-After behind a real Express app and a real Fastify app, on a real Redis.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import type { Server } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import express from "express";
import Fastify from "fastify";
import { callerScope, encodeResponse, fastifyIdempotency, fingerprint, idempotency, IdempotencyGuard, Namespace, PROBLEM_TYPE, recordDigest, REPLAYED_HEADER, type FastifyRequestLike } from "../src/index.js";
import { errorResponse, refusal } from "../src/idempotency/http.js";
import { startRedis, type RedisServer } from "./helpers.js";

const SPEC = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "spec");
const H = JSON.parse(readFileSync(join(SPEC, "vectors", "idempotency.json"), "utf8")).http;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let srv: RedisServer;
before(async () => {
  srv = await startRedis();
});
after(async () => {
  await srv.stop();
});

test("idempotency.json http: caller scopes, problems, Retry-After", () => {
  for (const s of H.scopes) {
    const scoped = `${callerScope(s.authorization, s.user)}:${s.key}`;
    assert.equal(scoped, s.scoped_key);
    assert.equal(`${new Namespace().prefix}:idem:${recordDigest("", scoped)}`, s.record);
  }
  for (const p of H.problems) {
    const r = errorResponse(p.status, p.detail);
    assert.deepEqual(r.h[0], ["content-type", H.content_type]);
    assert.deepEqual(JSON.parse(r.body.toString()), { type: H.problem_type, title: p.title, status: p.status, detail: p.detail });
  }
  for (const c of H.retry_after) {
    const r = refusal({ outcome: "in_progress", failed: false, retryAfterMs: c.lease_left_ms, takeover: false }, c.median_ms === null ? undefined : c.median_ms / 1000);
    assert.deepEqual(r.h.at(-1), ["retry-after", c.retry_after], JSON.stringify(c));
  }
});

/** The same checks for each framework: `url` serves POST /order (slow when the body says so). */
async function parity(guard: IdempotencyGuard, url: string, sharedUrl: string, runs: () => number) {
  const post = (key: string, body: string, auth?: string, u = url) =>
    fetch(u, { method: "POST", body, headers: { "content-type": "application/json", "Idempotency-Key": key, ...(auth ? { authorization: auth } : {}) } });
  const alice = "Bearer alice";
  const a1 = await (await post("k1", '{"a":1}', alice)).text();
  const r2 = await post("k1", '{"a":1}', alice);
  assert.equal(r2.headers.get(REPLAYED_HEADER), "true");
  assert.equal(await r2.text(), a1);
  assert.notEqual(await (await post("k1", '{"a":1}', "Bearer bob")).text(), a1, "bob got alice's response");
  assert.notEqual(await (await post("k1", '{"a":1}')).text(), a1, "no Authorization got alice's response");
  const s1 = await (await post("k2", '{"a":1}', alice, sharedUrl)).text();
  assert.equal(await (await post("k2", '{"a":1}', "Bearer bob", sharedUrl)).text(), s1, "a shared key space replays for everybody");

  // A record of the unscoped default (written before the upgrade) still replays.
  const fp = fingerprint("POST", "/order", "", '{"a":1}');
  const old = await guard.begin("legacy", fp);
  await guard.complete(old.lease!, encodeResponse({ s: 201, h: [["content-type", "text/plain"]], body: Buffer.from("before the upgrade") }));
  const before = runs();
  const lr = await post("legacy", '{"a":1}', alice);
  assert.equal(lr.headers.get(REPLAYED_HEADER), "true");
  assert.equal(await lr.text(), "before the upgrade");
  assert.equal(runs(), before);

  const mis = await post("k1", '{"a":2}', alice);
  assert.equal(mis.status, 422);
  assert.equal(mis.headers.get("content-type"), "application/problem+json");
  const p = await mis.json();
  assert.equal(p.type, PROBLEM_TYPE);
  assert.equal(p.detail, "this Idempotency-Key was used with a different request");
  const two = await post('"k3", "k4"', '{"a":1}', alice);
  assert.equal(two.status, 400);
  assert.equal((await two.json()).detail, "send one Idempotency-Key header, not several");

  // Retry-After: the median of the route's runs (0.6 s), not the 10 s lease; the slow one runs once.
  await post("k5", '{"slow":true}', alice);
  const n = runs();
  const first = post("k6", '{"slow":true}', alice);
  await sleep(200);
  const busy = await post("k6", '{"slow":true}', alice);
  assert.equal(busy.status, 409);
  assert.equal(busy.headers.get("retry-after"), "1");
  assert.equal((await first).status, 201);
  assert.equal(runs(), n + 1);
}

test("express: caller scope by Authorization, transition window, problems, Retry-After from the median", async () => {
  const guard = new IdempotencyGuard(srv.client(), { leaseMs: 10_000, ttlMs: 60_000, namespace: new Namespace("ex") });
  let runs = 0;
  const handler = async (req: express.Request, res: express.Response) => {
    runs++;
    if (req.body.slow) await sleep(600);
    res.status(201).json({ run: runs });
  };
  const app = express().use(idempotency(guard)).use(express.json()).post("/order", handler);
  const sharedApp = express().use(idempotency(guard, { shared: true })).use(express.json()).post("/order", handler);
  const listen = (a: express.Express): Promise<Server> => new Promise((ok) => { const s = a.listen(0, "127.0.0.1", () => ok(s)); });
  const [s1, s2] = [await listen(app), await listen(sharedApp)];
  const port = (s: Server) => (s.address() as { port: number }).port;
  try {
    await parity(guard, `http://127.0.0.1:${port(s1)}/order`, `http://127.0.0.1:${port(s2)}/order`, () => runs);
  } finally {
    await Promise.all([s1, s2].map((s) => new Promise((ok) => s.close(ok))));
  }
});

test("fastify: the same answers, raw-body fingerprints, keep-alive past the lease, a thrown handler releases the key", async () => {
  const guard = new IdempotencyGuard(srv.client(), { leaseMs: 10_000, ttlMs: 60_000, namespace: new Namespace("fy") });
  let runs = 0;
  let throws = 0;
  const build = (shared: boolean) => {
    const app = Fastify();
    app.register(fastifyIdempotency(guard, { shared }));
    app.post("/order", async (req, reply) => {
      runs++;
      const body = req.body as { slow?: boolean; fail?: boolean };
      if (body.slow) await sleep(600);
      if (body.fail && ++throws === 1) throw new Error("downstream timeout");
      const lease = (req as unknown as FastifyRequestLike).idempotencyLease;
      return reply.code(201).send({ run: runs, fenced: (lease?.token ?? 0n) > 0n });
    });
    return app;
  };
  const [app, shared] = [build(false), build(true)];
  const url = await app.listen({ port: 0, host: "127.0.0.1" });
  const sharedUrl = await shared.listen({ port: 0, host: "127.0.0.1" });
  try {
    await parity(guard, `${url}/order`, `${sharedUrl}/order`, () => runs);
    const post = (key: string, body: string) => fetch(`${url}/order`, { method: "POST", body, headers: { "content-type": "application/json", "Idempotency-Key": key } });
    const r = await post("f1", '{"x": 1}');
    assert.deepEqual(await r.json(), { run: runs, fenced: true });
    assert.equal((await post("f1", '{"x":1}')).status, 422, "the raw bytes count, not the parsed document");
    assert.equal((await post("f2", '{"fail":true}')).status, 500);
    assert.equal((await post("f2", '{"fail":true}')).status, 201, "a thrown handler released the key");

    // Keep-alive: a 300 ms lease, a 1 s handler; retries meanwhile get 409 and it runs once.
    const short = new IdempotencyGuard(srv.client(), { leaseMs: 300, ttlMs: 60_000, namespace: new Namespace("fy2") });
    const ka = Fastify();
    let slowRuns = 0;
    ka.register(fastifyIdempotency(short));
    ka.post("/slow", async () => {
      slowRuns++;
      await sleep(1000);
      return { slowRuns };
    });
    const kaUrl = await ka.listen({ port: 0, host: "127.0.0.1" });
    try {
      const slow = (key: string) => fetch(`${kaUrl}/slow`, { method: "POST", body: "{}", headers: { "content-type": "application/json", "Idempotency-Key": key } });
      const first = slow("s1");
      for (let i = 0; i < 3; i++) {
        await sleep(250);
        assert.equal((await slow("s1")).status, 409);
      }
      assert.equal((await first).status, 200);
      assert.equal(slowRuns, 1);
      assert.ok(short.stats.renewals >= 2, `renewals ${short.stats.renewals}`);
      assert.equal((await slow("s1")).headers.get(REPLAYED_HEADER), "true");
    } finally {
      await ka.close();
    }
  } finally {
    await app.close();
    await shared.close();
  }
});
