// The idempotency guard: spec/vectors/idempotency.json on a real Redis, the keep-alive,
// and the connect-style middleware behind a real node:http server.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Cluster, Redis } from "ioredis";
import {
  checkKey, fingerprint, idempotency, IdempotencyGuard, IdempotencyKeyError, IdempotencyUnavailable, LeaseLostError, Namespace,
  MAX_KEY_HEADER, recordDigest, REPLAYED_HEADER, type GuardedRequest, type Lease,
} from "../src/index.js";
import { freePort, startRedis, type RedisServer } from "./helpers.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const SPEC = join(ROOT, "..", "..", "spec");
const V = JSON.parse(readFileSync(join(SPEC, "vectors", "idempotency.json"), "utf8"));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let srv: RedisServer;
before(async () => {
  srv = await startRedis();
});
after(async () => {
  await srv.stop();
});

test("the packaged Lua scripts are spec/lua's, byte for byte", () => {
  const names = readdirSync(join(SPEC, "lua")).filter((n) => n.startsWith("idempotency_"));
  assert.equal(names.length, 4);
  for (const n of names) assert.equal(readFileSync(join(ROOT, "lua", n), "utf8"), readFileSync(join(SPEC, "lua", n), "utf8"), n);
});

test("idempotency.json: digests and record names", () => {
  for (const f of V.fingerprints) assert.equal(fingerprint(...f.parts), f.digest);
  for (const r of V.records) {
    const g = new IdempotencyGuard(srv.client(), { namespace: new Namespace(r.prefix), scope: r.scope });
    assert.equal(g.recordOf(r.key), r.record);
    assert.equal(`${r.prefix}:idem:${recordDigest(r.scope, r.key)}`, r.record);
  }
});

async function fenced(call: () => Promise<void>): Promise<string> {
  try {
    await call();
    return "ok";
  } catch (err) {
    if (err instanceof LeaseLostError) return "lease_lost";
    if (err instanceof IdempotencyUnavailable) return "unavailable";
    throw err;
  }
}

for (const raw of V.cases) {
  const c = { ...V.defaults, ...raw };
  test(`idempotency.json: ${c.name}`, async () => {
    const port = c.redis === "up" ? srv.port : await freePort();
    const client = new Redis({ port, host: "127.0.0.1", lazyConnect: c.redis !== "up", maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: c.redis === "up" });
    client.on("error", () => {});
    if (c.redis === "up") await client.flushall();
    const guards = new Map<string, IdempotencyGuard>();
    const guard = (step: { scope?: string }) => {
      const scope = step.scope ?? c.scope;
      if (!guards.has(scope)) {
        guards.set(scope, new IdempotencyGuard(client, {
          leaseMs: c.lease_ms, ttlMs: c.ttl_ms, namespace: new Namespace(c.prefix), scope,
          auditMaxLen: c.audit_maxlen, maxKeyLength: c.max_key_length, onError: c.on_error,
        }));
      }
      return guards.get(scope)!;
    };
    const leases = new Map<string, Lease>();
    try {
      for (const [i, step] of c.steps.entries()) {
        const where = `step ${i} ${JSON.stringify(step).slice(0, 200)}`;
        const want = step.expect;
        switch (step.op) {
          case "sleep":
            await sleep(step.ms);
            break;
          case "begin": {
            let b;
            try {
              b = await guard(step).begin(step.key, step.fingerprint);
            } catch (err) {
              if (want.error === "key" && err instanceof IdempotencyKeyError) break;
              if (want.error === "unavailable" && err instanceof IdempotencyUnavailable) break;
              throw err;
            }
            assert.equal(want.error, undefined, where);
            assert.equal(b.outcome, want.outcome, where);
            if ("takeover" in want) assert.equal(b.takeover, want.takeover, where);
            if ("guarded" in want) assert.equal(b.lease?.guarded, want.guarded, where);
            if ("token_above" in want) assert.ok(b.lease!.token > leases.get(want.token_above)!.token, where);
            if ("retry_after_ms_max" in want) assert.ok(b.retryAfterMs > 0 && b.retryAfterMs <= want.retry_after_ms_max, where);
            if ("result" in want) assert.equal(b.result?.toString("utf8"), want.result, where);
            if ("failed" in want) assert.equal(b.failed, want.failed, where);
            if (step.as && b.lease) leases.set(step.as, b.lease);
            break;
          }
          case "complete":
          case "fail":
          case "release":
          case "extend": {
            const g = guard(step);
            const l = leases.get(step.lease)!;
            const res = step.result ?? "";
            const calls: Record<string, () => Promise<void>> = {
              complete: () => g.complete(l, res), fail: () => g.fail(l, res), release: () => g.release(l), extend: () => g.extend(l),
            };
            assert.equal(await fenced(calls[step.op]), want, where);
            break;
          }
          case "record": {
            const rec = await client.hgetall(guard(step).recordOf(step.key));
            if (want.absent) {
              assert.deepEqual(rec, {}, where);
              break;
            }
            assert.equal(rec.st, want.st, where);
            if ("res" in want) assert.equal(rec.res, want.res, where);
            if ("fingerprint" in want) assert.equal(rec.fp, fingerprint(want.fingerprint), where);
            if ("token_of" in want) assert.equal(rec.tok, leases.get(want.token_of)!.token.toString(), where);
            break;
          }
          case "audit": {
            const events = await client.xrange(`${c.prefix}:idem-audit`, "-", "+");
            assert.deepEqual(events.map(([, f]) => f[f.indexOf("ev") + 1]), want, where);
            break;
          }
          default:
            assert.fail(`unknown op ${step.op}`);
        }
      }
    } finally {
      client.disconnect();
    }
  });
}

test("keepAlive renews while the work runs and stops when it ends", async () => {
  const g = new IdempotencyGuard(srv.client(), { leaseMs: 300, ttlMs: 60_000 });
  const b = await g.begin("long");
  const ka = g.keepAlive(b.lease!);
  await sleep(800); // well past the lease
  assert.equal((await g.begin("long")).outcome, "in_progress");
  await ka.stop();
  const beats = ka.beats;
  assert.ok(beats >= 2, `beats ${beats}`);
  await sleep(500);
  assert.equal(ka.beats, beats, "renewals went on after stop()");
  const taken = await g.begin("long");
  assert.ok(taken.outcome === "new" && taken.takeover);
  const ka2 = g.keepAlive(b.lease!, 50); // the old holder learns it lost the lease
  await new Promise((r) => ka2.signal.addEventListener("abort", r));
  assert.ok(ka2.lost instanceof LeaseLostError);
  await ka2.stop();
  await assert.rejects(g.complete(b.lease!, "stale"), LeaseLostError);
});

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ url: string; close(): Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return { url, close: () => new Promise((r) => server.close(() => r())) };
}

test("middleware: replay, 409 while a slow handler keeps its lease, 422, 400, release on 5xx", async () => {
  const g = new IdempotencyGuard(srv.client(), { leaseMs: 300, ttlMs: 60_000 });
  const mw = idempotency(g, { required: (req) => req.url === "/order" });
  let runs = 0;
  let booms = 0;
  let slowStarted: () => void = () => {};
  const started = new Promise<void>((ok) => (slowStarted = ok));
  const app = await serve((req, res) => {
    mw(req, res, async (err?: unknown) => {
      if (err) {
        res.statusCode = 500;
        res.end(String(err));
        return;
      }
      const n = ++runs;
      const r = req as GuardedRequest;
      const body = r.rawBody?.toString() ?? "";
      if (body.includes("slow")) {
        slowStarted();
        await sleep(1000);
      }
      if (body.includes("boom") && ++booms === 1) {
        res.writeHead(503).end();
        return;
      }
      res.setHeader("content-type", "application/json");
      res.writeHead(201);
      res.write(`{"run":${n},`);
      res.end(`"leased":${(r.idempotencyLease?.token ?? 0n) > 0n},"body":${JSON.stringify(body)}}`);
    });
  });
  const post = (key: string | undefined, body: string) =>
    fetch(`${app.url}/order`, { method: "POST", body, headers: key === undefined ? {} : { "Idempotency-Key": key } });
  const rawPost = (keys: string[]) =>
    new Promise<number>((resolve, reject) => {
      const req = request(`${app.url}/order`, { method: "POST" }, (res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      req.setHeader("Idempotency-Key", keys); // one header line each
      req.on("error", reject);
      req.end("a");
    });
  try {
    const r1 = await post("k1", "a");
    const b1 = await r1.text();
    assert.equal(r1.status, 201);
    assert.equal(b1, '{"run":1,"leased":true,"body":"a"}');
    const r2 = await post("k1", "a");
    assert.equal(await r2.text(), b1);
    assert.equal(r2.status, 201);
    assert.equal(r2.headers.get(REPLAYED_HEADER), "true");
    assert.equal(r2.headers.get("content-type"), "application/json");
    assert.equal((await post("k1", "b")).status, 422);
    assert.equal((await post(undefined, "a")).status, 400);
    assert.equal(await rawPost(["k2", "k3"]), 400);
    assert.equal(await rawPost(["caf\u00e9"]), 400);
    assert.equal(await rawPost(["k6"]), 201);
    assert.equal((await post("k4", "boom")).status, 503);
    assert.equal((await post("k4", "boom")).status, 201, "a 5xx releases the key");

    const before = runs;
    const first = post("k5", "slow").then((r) => r.text());
    await started; // the first request runs: every retry from now on meets it
    for (let i = 0; i < 4; i++) {
      await sleep(180);
      const r = await post("k5", "slow");
      assert.equal(r.status, 409);
      assert.equal(r.headers.get("retry-after"), "1");
      await r.text();
    }
    const slow = await first;
    assert.equal(runs, before + 1, "the slow handler ran once");
    assert.ok(g.stats.renewals >= 2, `renewals ${g.stats.renewals}`);
    assert.equal(await (await post("k5", "slow")).text(), slow);
  } finally {
    await app.close();
  }
});

test("middleware: Redis down, failing closed, answers 503 and runs nothing", async () => {
  const client = new Redis({ port: await freePort(), host: "127.0.0.1", lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, enableOfflineQueue: false });
  client.on("error", () => {});
  const mw = idempotency(new IdempotencyGuard(client));
  let ran = false;
  const app = await serve((req, res) => mw(req, res, () => { ran = true; res.end("ran"); }));
  try {
    const r = await fetch(app.url, { method: "POST", body: "x", headers: { "Idempotency-Key": "k" } });
    assert.equal(r.status, 503);
    assert.equal(r.headers.get("retry-after"), "1");
    assert.equal(ran, false);
  } finally {
    await app.close();
    client.disconnect();
  }
});

test("on a Cluster the guard needs auditMaxLen: 0 (the stream is in another slot)", () => {
  const c = new Cluster([{ host: "127.0.0.1", port: 1 }], { lazyConnect: true });
  assert.throws(() => new IdempotencyGuard(c), /auditMaxLen: 0/);
  assert.ok(new IdempotencyGuard(c, { auditMaxLen: 0 }));
  c.disconnect();
});

test("many callers at once: exactly one runs", async () => {
  const clients = Array.from({ length: 10 }, () => srv.client());
  const guards = clients.map((c) => new IdempotencyGuard(c));
  const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => guards[i % guards.length].begin("race", "f")));
  assert.equal(answers.filter((b) => b.outcome === "new").length, 1);
  assert.equal(answers.filter((b) => b.outcome === "in_progress").length, 49);
});

test("limits.json idempotency_keys: the header-key check", () => {
  const cases = JSON.parse(readFileSync(join(SPEC, "vectors", "limits.json"), "utf8")).idempotency_keys as { key: string; error: boolean }[];
  assert.ok(cases.length > 0);
  for (const c of cases) {
    if (c.error) assert.throws(() => checkKey(c.key, MAX_KEY_HEADER), IdempotencyKeyError, `${c.key.length} chars`);
    else assert.equal(checkKey(c.key, MAX_KEY_HEADER), c.key);
  }
});
