/**
 * HotCache: serve hot keys from process memory, pass everything else to Redis.
 *
 * A key is served locally only while the daemon says it is hot, for at most the ttl_ms
 * of the rule that made it hot (capped by maxTtlMs): even if every invalidation were
 * lost a reader sees a value at most that old. Writes through the cache publish an
 * invalidation in the same round trip, and every HotCache drops its copy. Reads served
 * locally are reported to the daemon (demand reports), so the key stays hot while the
 * load lasts instead of cooling because Redis stopped seeing it.
 */
import { hostname } from "node:os";
import { randomBytes } from "node:crypto";
import { Cluster } from "ioredis";
import { LRUCache } from "lru-cache";
import { MessageAuth, SIGNATURE_BYTES } from "./auth.js";
import { homePrimary, slotOwner } from "./home.js";
import { keyBytes } from "./keys.js";
import { keyId, type HotItem } from "./hotset.js";
import { Subscriber, type RedisLike, type SubscriberOptions } from "./subscriber.js";
import { WatchGate, type Consistency, type IntakeStats, type WatchStats } from "./watch.js";
import { buildDemandReports, encodeInvalidation, MAX_DEMAND_BYTES, type DemandRead } from "./wire.js";

export interface CacheOptions extends SubscriberOptions {
  maxEntries?: number; // 10000
  maxBytes?: number; // 32 MiB (estimated)
  maxTtlMs?: number; // cap on a local copy's life
  /** serve a stale copy this long while one caller refreshes it (1000 ms) */
  staleForMs?: number;
  /** report locally served reads every this many ms (250); 0 disables (the key may then flap) */
  demandIntervalMs?: number;
  /**
   * sign demand reports with this reporter key (the daemon's --demand-key-file; never its
   * signing key); by default the key of HOTKEYD_DEMAND_KEY_FILE or HOTKEYD_DEMAND_KEY,
   * unsigned when neither is set; null: never sign
   */
  demandAuth?: MessageAuth | null;
  /** logical database of the wrapped client (its options are read when omitted) */
  db?: number;
  /** "available" (default): copies live until their TTL and lapses of the daemon's watch
   * are counted (watchStats.lapsed); "strict": a copy is served only while the watch of
   * its node vouches for it, else the read goes to Redis (docs/consistency.md) */
  consistency?: Consistency;
}

export interface CacheStats {
  hits: number;
  staleHits: number;
  misses: number;
  loads: number;
  invalidations: number;
  /** invalidations dropped whole: oversized, unsigned (auth on) or malformed */
  badInvalidations: number;
  demandReports: number;
  demandEntries: number;
  demandDropped: number;
  demandSendErrors: number;
}

interface Entry {
  value: unknown;
  expires: number;
  rkey: string;
}

const ENTRY_OVERHEAD = 120;

export class HotCache {
  readonly subscriber: Subscriber;
  readonly origin: string;
  readonly stats: CacheStats = {
    hits: 0, staleHits: 0, misses: 0, loads: 0, invalidations: 0, badInvalidations: 0,
    demandReports: 0, demandEntries: 0, demandDropped: 0, demandSendErrors: 0,
  };
  private readonly local: LRUCache<string, Entry>;
  private readonly byKey = new Map<string, Set<string>>(); // redis key id -> cache keys
  private readonly flights = new Map<string, { promise: Promise<unknown>; rkey: string; tainted: boolean }>();
  private demand = new Map<string, DemandRead>();
  private demandSeq = 0;
  private demandTimer?: NodeJS.Timeout;
  private readonly db: number;
  private readonly staleForMs: number;
  private readonly maxTtlMs: number;
  private readonly demandIntervalMs: number;
  private readonly demandAuth?: MessageAuth;
  private readonly sharded: boolean;
  private readonly gate: WatchGate;
  private readonly auth: CacheOptions["auth"];

  constructor(
    readonly client: RedisLike,
    opts: CacheOptions = {},
  ) {
    this.db = opts.db ?? ((client as { options?: { db?: number } }).options?.db ?? 0);
    this.staleForMs = opts.staleForMs ?? 1000;
    this.maxTtlMs = opts.maxTtlMs ?? Infinity;
    this.demandIntervalMs = opts.demandIntervalMs ?? 250;
    this.demandAuth = opts.demandAuth === undefined ? MessageAuth.reporterKeyFromEnv() : (opts.demandAuth ?? undefined);
    this.sharded = opts.sharded ?? false;
    this.origin = `${hostname()}-${process.pid}-${randomBytes(4).toString("hex")}`;
    this.local = new LRUCache<string, Entry>({
      max: opts.maxEntries ?? 10_000,
      maxSize: opts.maxBytes ?? 32 << 20,
      sizeCalculation: (e, k) => ENTRY_OVERHEAD + k.length + estimateSize(e.value),
      dispose: (e, k) => this.byKey.get(e.rkey)?.delete(k),
    });
    this.auth = opts.auth;
    let gate: WatchGate | undefined;
    this.subscriber = new Subscriber(client, {
      ...opts,
      onInvalidationPayload: (p) => {
        if (!gate!.onInvalidation(p)) this.stats.badInvalidations++;
      },
      onHeartbeat: (p) => gate!.onHeartbeat(p),
      onReset: () => {
        this.clearLocal();
        gate!.reset();
        opts.onReset?.();
      },
    });
    gate = new WatchGate(
      opts.consistency ?? "available", this.subscriber.hotSet, this.subscriber.hotSet.clock, opts.auth,
      (k) => this.dropBytes(k), () => this.clearLocal(),
    );
    this.gate = gate;
    this.subscriber.hotSet.addListener({ onCool: (k) => this.dropBytes(k.bytes) });
  }

  get hotSet() {
    return this.subscriber.hotSet;
  }

  /** "available" or "strict" */
  get consistency(): Consistency {
    return this.gate.mode;
  }

  /** heartbeats heard, epoch changes, lapses, strict-mode misses */
  get watchStats(): WatchStats {
    return this.gate.stats;
  }

  /** invalidations applied, deferred by the per-key limit, and dropped */
  get intakeStats(): IntakeStats {
    return this.gate.intake.stats;
  }

  /** Subscribe and bootstrap the hot set; start the demand reports. */
  async start(): Promise<this> {
    await this.subscriber.start();
    if (this.demandIntervalMs > 0) {
      this.demandTimer = setInterval(() => void this.flushDemand(), this.demandIntervalMs);
      this.demandTimer.unref();
    }
    return this;
  }

  /**
   * Stop following (after a last demand report, given at most 1 s: a frozen or dead node
   * must not hold the app's shutdown). The wrapped client stays open.
   */
  async close(): Promise<void> {
    if (this.demandTimer) clearInterval(this.demandTimer);
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.flushDemand().catch(() => {}),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, 1000).unref();
      }),
    ]);
    clearTimeout(timer);
    await this.subscriber.close();
  }

  // ------------------------------------------------------------------ reads
  /** GET, served locally while key is hot. */
  async get(key: string): Promise<string | null> {
    const item = this.hotSet.getText(key, this.db);
    if (item === undefined) return this.client.get(key);
    return this.load(item, "g\u0000" + key, key, () => this.client.get(key)) as Promise<string | null>;
  }

  /** GET for binary keys and values. */
  async getBuffer(key: Buffer): Promise<Buffer | null> {
    const item = this.hotSet.get(key, this.db);
    if (item === undefined) return this.client.getBuffer(key);
    const id = keyId(key, 0);
    return this.load(item, "G\u0000" + id, id, () => this.client.getBuffer(key)) as Promise<Buffer | null>;
  }

  async hget(key: string, field: string): Promise<string | null> {
    const item = this.hotSet.getText(key, this.db);
    if (item === undefined) return this.client.hget(key, field);
    return this.load(item, "h\u0000" + field + "\u0000" + key, key, () => this.client.hget(key, field)) as Promise<string | null>;
  }

  /** HGETALL, served locally while key is hot (the caller gets its own copy). */
  async hgetall(key: string): Promise<Record<string, string>> {
    const item = this.hotSet.getText(key, this.db);
    if (item === undefined) return this.client.hgetall(key);
    const v = (await this.load(item, "H\u0000" + key, key, () => this.client.hgetall(key))) as Record<string, string>;
    return { ...v };
  }

  /** MGET: hot keys from the local cache, the rest in one MGET. */
  async mget(...keys: string[]): Promise<(string | null)[]> {
    const out: (string | null)[] = new Array(keys.length).fill(null);
    const need: number[] = [];
    const hot: Promise<void>[] = [];
    keys.forEach((k, i) => {
      if (this.hotSet.getText(k, this.db) === undefined) need.push(i);
      else hot.push(this.get(k).then((v) => void (out[i] = v), (e) => {
        if (!String(e).includes("WRONGTYPE")) throw e;
      }));
    });
    if (need.length > 0) {
      const vals = await this.client.mget(...need.map((i) => keys[i]));
      need.forEach((i, j) => (out[i] = vals[j]));
    }
    await Promise.all(hot);
    return out;
  }

  /** loader()'s result, cached locally while key is hot (one load at a time per key). */
  async cached<T>(key: string, loader: () => Promise<T>): Promise<T> {
    const item = this.hotSet.getText(key, this.db);
    if (item === undefined) return loader();
    return this.load(item, "c\u0000" + key, key, loader, false) as Promise<T>;
  }

  private load(item: HotItem, ck: string, rkey: string, fetch: () => Promise<unknown>, watched = true): Promise<unknown> {
    const now = this.hotSet.clock.now();
    const kb = item.entry.bytes;
    if (!watched) this.gate.settle(kb, now);
    const admitted = !watched || this.gate.admit(ck, kb, now);
    const e = admitted ? this.local.get(ck) : undefined;
    let flight = this.flights.get(ck);
    if (e !== undefined && (e.expires > now || (flight !== undefined && now < e.expires + this.staleForMs))) {
      if (e.expires > now) this.stats.hits++;
      else this.stats.staleHits++;
      this.count(item);
      return Promise.resolve(e.value);
    }
    if (watched && !this.gate.beforeFetch(ck, kb, this.db, now)) return fetch(); // strict, unwatched: not cached
    flight = this.flights.get(ck);
    if (flight !== undefined) {
      this.count(item); // single-flight: this read shares the one in flight
      return flight.promise;
    }
    this.stats.misses++;
    this.stats.loads++;
    const ttl = Math.min(item.entry.ttlMs, this.maxTtlMs);
    const f = { promise: Promise.resolve() as Promise<unknown>, rkey, tainted: false };
    f.promise = fetch().then(
      (v) => {
        this.flights.delete(ck);
        if (!f.tainted) this.store(ck, rkey, v, this.hotSet.clock.now() + ttl);
        return v;
      },
      (err) => {
        this.flights.delete(ck);
        throw err;
      },
    );
    this.flights.set(ck, f);
    return f.promise;
  }

  private store(ck: string, rkey: string, value: unknown, expires: number): void {
    this.local.set(ck, { value, expires, rkey });
    let set = this.byKey.get(rkey);
    if (!set) this.byKey.set(rkey, (set = new Set()));
    set.add(ck);
  }

  private count(item: HotItem): void {
    if (this.demandIntervalMs <= 0) return;
    const { bytes, db } = item.entry;
    const id = keyId(bytes, db);
    const r = this.demand.get(id);
    if (r !== undefined) {
      r.n++;
      r.instance = item.owner;
    } else {
      this.demand.set(id, { bytes, db, n: 1, instance: item.owner });
    }
  }

  /** Send one demand report per daemon instance with the reads served locally. */
  async flushDemand(): Promise<void> {
    if (this.demand.size === 0) return;
    const reads = [...this.demand.values()];
    this.demand = new Map();
    const maxBytes = MAX_DEMAND_BYTES - (this.demandAuth ? SIGNATURE_BYTES : 0);
    const reports = buildDemandReports(this.origin, this.demandSeq, Date.now() / 1000, this.demandIntervalMs, reads, maxBytes);
    this.demandSeq += reports.length;
    await Promise.all(
      reports.map(async (r) => {
        this.stats.demandDropped += r.dropped;
        try {
          const payload = this.demandAuth ? this.demandAuth.sign(Buffer.from(r.payload, "utf8")) : r.payload;
          await this.publish(this.subscriber.namespace.demandChannel(r.instance), payload);
          this.stats.demandReports++;
          this.stats.demandEntries += r.entries;
        } catch {
          this.stats.demandSendErrors++;
        }
      }),
    );
  }

  // ----------------------------------------------------------------- writes
  /** SET (extra arguments as ioredis takes them), then invalidate key everywhere. */
  async set(key: string, value: string | Buffer | number, ...args: (string | number)[]): Promise<unknown> {
    return this.write([key], (p) => (p.set as (...a: unknown[]) => unknown)(key, value, ...args));
  }

  async del(...keys: string[]): Promise<unknown> {
    return this.write(keys, (p) => p.del(...keys));
  }

  async hset(key: string, ...fieldValues: (string | number)[]): Promise<unknown> {
    return this.write([key], (p) => p.hset(key, ...fieldValues));
  }

  async incrby(key: string, n: number): Promise<unknown> {
    return this.write([key], (p) => p.incrby(key, n));
  }

  /** Drop keys here and broadcast their invalidation (after a DB write, say). */
  async invalidate(...keys: string[]): Promise<void> {
    for (const k of keys) this.drop(k);
    await this.publish(this.subscriber.namespace.invalidateChannel, this.invalidation(keys));
  }

  /**
   * PUBLISH, or SPUBLISH in a sharded deployment. On a Cluster a plain PUBLISH goes to the
   * home primary of the invalidation channel, where every SDK's subscription sits (home.ts);
   * ioredis would send it to a random node, and the cluster bus delivers it ~40 ms later.
   */
  private publish(channel: string, payload: string | Buffer): Promise<unknown> {
    if (this.sharded) return this.client.spublish(channel, payload);
    const home = this.client instanceof Cluster ? homePrimary(this.client, this.subscriber.namespace.invalidateChannel) : undefined;
    return (home ?? this.client).publish(channel, payload);
  }

  private invalidation(keys: string[]): string | Buffer {
    const body = encodeInvalidation(this.origin, keys.map((k) => keyBytes(k)));
    const auth = this.auth;
    return auth ? auth.sign(Buffer.from(body, "utf8")) : body; // apps with the key drop unsigned ones
  }

  /**
   * The write, then the invalidation: one pipeline (one round trip) on a single node. On a
   * Cluster a pipeline goes to one node: the invalidation rides along when the key's node is
   * the home primary of the channel (plain PUBLISH) and follows the write otherwise (two
   * round trips; a sharded channel has a slot of its own).
   */
  private async write(keys: string[], add: (p: ReturnType<RedisLike["pipeline"]>) => unknown): Promise<unknown> {
    const channel = this.subscriber.namespace.invalidateChannel;
    try {
      if (this.client instanceof Cluster && (this.sharded || !this.homeHolds(keys[0]!))) {
        const p = this.client.pipeline();
        add(p);
        const [err, value] = (await p.exec())![0];
        if (err) throw err;
        await this.publish(channel, this.invalidation(keys));
        return value;
      }
      const p = this.client.pipeline();
      add(p);
      if (this.sharded) p.spublish(channel, this.invalidation(keys));
      else p.publish(channel, this.invalidation(keys));
      const [err, value] = (await p.exec())![0];
      if (err) throw err;
      return value;
    } finally {
      for (const k of keys) this.drop(k); // also when the write failed: its effect is unknown
    }
  }

  /** On a Cluster: the key's slot and the invalidation channel's have one owner (or no map yet). */
  private homeHolds(key: string): boolean {
    const c = this.client as Cluster;
    const home = slotOwner(c, this.subscriber.namespace.invalidateChannel);
    return home === undefined || slotOwner(c, key) === home;
  }

  private drop(key: string): void {
    this.dropBytes(Buffer.from(key, "utf8"));
  }

  private dropBytes(k: Buffer): void {
    this.dropId(k.toString("utf8"));
    this.dropId(keyId(k, 0));
  }

  private dropId(rkey: string): void {
    this.stats.invalidations++;
    for (const ck of this.byKey.get(rkey) ?? []) this.local.delete(ck);
    this.byKey.delete(rkey);
    for (const f of this.flights.values()) if (f.rkey === rkey) f.tainted = true;
  }

  private clearLocal(): void {
    this.local.clear();
    this.byKey.clear();
    for (const f of this.flights.values()) f.tainted = true;
  }
}

function estimateSize(v: unknown): number {
  if (v === null || v === undefined) return 1;
  if (typeof v === "string") return v.length * 2;
  if (Buffer.isBuffer(v)) return v.length;
  if (typeof v === "object") {
    let n = 32;
    for (const [k, x] of Object.entries(v as Record<string, unknown>)) n += k.length * 2 + estimateSize(x);
    return n;
  }
  return 8;
}
