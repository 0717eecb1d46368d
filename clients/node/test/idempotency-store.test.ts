// Defect 2's rule on a real PostgreSQL: a result whose Redis record was lost (a restart
// between begin and complete) is still written to the store and replayed; a true double
// completion throws DuplicateCompletionError with the first result.
import { after, before, test } from "node:test";
import assert from "node:assert/strict";
import { DuplicateCompletionError, IdempotencyGuard, LeaseLostError, SqlIdempotencyStore } from "../src/index.js";
import { startRedis, type RedisServer } from "./helpers.js";
import { startPostgres, type PostgresServer } from "./postgres.js";

let redis: RedisServer;
let pg: PostgresServer;
before(async () => {
  [redis, pg] = await Promise.all([startRedis(), startPostgres()]);
});
after(async () => {
  await Promise.all([redis.stop(), pg.stop()]);
});

test("a result outlives Redis in the store; a double completion is caught", async () => {
  const r = redis.client();
  const store = new SqlIdempotencyStore(pg.pool, "idem_node");
  await store.createTable();
  const g = new IdempotencyGuard(r, { leaseMs: 5000, ttlMs: 60_000, store });
  const lost = () => r.flushall(); // a restart without persistence

  const a = await g.begin("k1", "f");
  await lost();
  await g.complete(a.lease!, "r1"); // stored, though Redis forgot the record
  await lost();
  const replay = await g.begin("k1", "f");
  assert.equal(replay.outcome, "done");
  assert.equal(replay.result?.toString(), "r1");
  assert.equal((await g.begin("k1", "f")).outcome, "done", "Redis learnt it again");
  await lost();
  assert.equal((await g.begin("k1", "other")).outcome, "mismatch");

  const first = await g.begin("k2", "f");
  await lost();
  const second = await g.begin("k2", "f");
  assert.equal(second.outcome, "new", "the operation runs twice");
  await g.complete(second.lease!, "from second");
  await lost();
  await assert.rejects(g.complete(first.lease!, "from first"), (err: unknown) => {
    assert.ok(err instanceof DuplicateCompletionError);
    assert.equal(err.stored.result.toString(), "from second");
    return true;
  });
  assert.equal((await g.begin("k2", "f")).result?.toString(), "from second");
  assert.equal(g.stats.duplicates, 1);
  assert.ok(g.stats.storeReplays >= 2);

  // A record taken over by another holder stays refused: that holder completes.
  const quick = new IdempotencyGuard(r, { leaseMs: 50, ttlMs: 60_000, store });
  const old = await quick.begin("k3", "f");
  await new Promise((ok) => setTimeout(ok, 100));
  assert.ok((await quick.begin("k3", "f")).takeover);
  await assert.rejects(quick.complete(old.lease!, "stale"), LeaseLostError);
  r.disconnect();
});
