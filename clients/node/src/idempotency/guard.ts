/**
 * The idempotency guard: run an operation once per key, across processes, hosts and
 * languages. Every transition is one of the shared scripts in spec/lua/idempotency_*.lua
 * (copied into the package at build time), and records are the same Redis hashes the
 * Python, Go and Java clients write: a key begun in Java can be completed here.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { Cluster, Redis } from "ioredis";
import { Namespace } from "../wire.js";
import { checkKey, fingerprint, recordDigest } from "./keys.js";
import { DuplicateCompletionError, type IdempotencyStore, type StoredFinal } from "./store.js";

const LUA_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "lua");

class Script {
  readonly sha: string;
  constructor(readonly src: string) {
    this.sha = createHash("sha1").update(src).digest("hex");
  }
  /** EVALSHA, and EVAL once when the server does not know the script yet. */
  async run(client: Redis | Cluster, keys: string[], args: (string | number | Buffer)[]): Promise<unknown[]> {
    try {
      return (await client.callBuffer("EVALSHA", this.sha, keys.length, ...keys, ...args)) as unknown[];
    } catch (err) {
      if (!String((err as Error)?.message).startsWith("NOSCRIPT")) throw err;
      return (await client.callBuffer("EVAL", this.src, keys.length, ...keys, ...args)) as unknown[];
    }
  }
}

const lua = (name: string) => new Script(readFileSync(join(LUA_DIR, `idempotency_${name}.lua`), "utf8"));
const BEGIN = lua("begin");
const COMPLETE = lua("complete");
const EXTEND = lua("extend");
const RELEASE = lua("release");

/** complete, fail, extend or release was refused by the fencing token: nothing was stored. */
export class LeaseLostError extends Error {
  override name = "LeaseLostError";
  constructor(
    readonly op: string,
    readonly key: string,
    readonly token: bigint,
    /** "gone", "fenced" or "final" */
    readonly reason: string,
  ) {
    const detail: Record<string, string> = {
      gone: "the record expired or was released (lease/TTL too short?)",
      fenced: "another holder took over after the lease ran out",
      final: "the record is already final",
    };
    super(`${op} refused for idempotency key ${JSON.stringify(key)} (token ${token}): ${detail[reason] ?? reason}`);
  }
}

/** Redis failed and the guard fails closed: nothing ran. */
export class IdempotencyUnavailable extends Error {
  override name = "IdempotencyUnavailable";
}

export type Outcome = "new" | "in_progress" | "done" | "mismatch";

/**
 * The right to run one operation, proven by a fencing token. Pass `token` to downstream
 * writes (`UPDATE ... WHERE fence < $token`). `guarded` is false only when the guard
 * failed open: nothing in Redis protects this run.
 */
export interface Lease {
  readonly key: string;
  readonly record: string;
  readonly token: bigint;
  readonly fingerprint: string;
  readonly guarded: boolean;
}

export interface BeginResult {
  outcome: Outcome;
  /** set when outcome is "new" */
  lease?: Lease;
  /** the stored result when outcome is "done" */
  result?: Buffer;
  /** the stored result is a recorded failure (fail()) */
  failed: boolean;
  /** ms until the holder's lease runs out ("in_progress") */
  retryAfterMs: number;
  /** "new" because an earlier holder's lease ran out */
  takeover: boolean;
}

export interface IdempotencyOptions {
  /** ms a PROCESSING record belongs to its holder (30 s); renew long work with keepAlive() */
  leaseMs?: number;
  /** ms a record lives to be replayed (24 h; at least leaseMs) */
  ttlMs?: number;
  namespace?: Namespace;
  /** separates key spaces (per service or route) */
  scope?: string;
  /** cap of the audit stream `<prefix>:idem-audit` (10000; 0: no audit, for Redis Cluster) */
  auditMaxLen?: number;
  /** longest key accepted (1024) */
  maxKeyLength?: number;
  /** "closed" (default): a Redis failure throws IdempotencyUnavailable; "open": run unguarded */
  onError?: "closed" | "open";
  /** hears every Redis failure (logs, metrics) */
  onRedisError?: (op: string, err: unknown) => void;
  /**
   * keeps every final result durably too (see store.ts): a result Redis forgot is replayed
   * from it, and a result whose record Redis lost is still written there, its unique key
   * fencing a second completion (DuplicateCompletionError)
   */
  store?: IdempotencyStore;
}

export interface IdempotencyStats {
  new: number; inProgress: number; done: number; mismatch: number; takeovers: number;
  leaseLost: number; badInput: number; unavailable: number; renewals: number;
  /** begin answered from the durable store; completions its unique key refused */
  storeReplays: number; duplicates: number;
}

type Reply = unknown[];
const s = (v: unknown): string => (Buffer.isBuffer(v) ? v.toString("latin1") : String(v));

/** The idempotency guard over an ioredis client (see the module comment). */
export class IdempotencyGuard {
  readonly leaseMs: number;
  readonly ttlMs: number;
  readonly namespace: Namespace;
  readonly scope: string;
  readonly auditMaxLen: number;
  readonly maxKeyLength: number;
  readonly onError: "closed" | "open";
  readonly stats: IdempotencyStats = {
    new: 0, inProgress: 0, done: 0, mismatch: 0, takeovers: 0, leaseLost: 0, badInput: 0, unavailable: 0, renewals: 0, storeReplays: 0, duplicates: 0,
  };
  private readonly onRedisError?: (op: string, err: unknown) => void;
  readonly store?: IdempotencyStore;

  constructor(readonly client: Redis | Cluster, options: IdempotencyOptions = {}) {
    this.leaseMs = options.leaseMs ?? 30_000;
    this.ttlMs = options.ttlMs ?? 24 * 3600_000;
    this.namespace = options.namespace ?? new Namespace();
    this.scope = options.scope ?? "";
    this.auditMaxLen = options.auditMaxLen ?? 10_000;
    this.maxKeyLength = options.maxKeyLength ?? 1024;
    this.onError = options.onError ?? "closed";
    this.onRedisError = options.onRedisError;
    this.store = options.store;
    if (!(this.leaseMs >= 1 && this.leaseMs <= 365 * 86400_000)) throw new RangeError(`leaseMs must be 1 ms .. 1 year, got ${this.leaseMs}`);
    if (!(this.ttlMs >= this.leaseMs)) {
      throw new RangeError(`ttlMs (${this.ttlMs}) must be >= leaseMs (${this.leaseMs}): a record must outlive its lease, or a slow holder's retry runs twice`);
    }
    if (this.onError !== "closed" && this.onError !== "open") throw new RangeError(`onError must be "closed" or "open", got ${this.onError}`);
    if (!(this.auditMaxLen >= 0)) throw new RangeError(`auditMaxLen must be >= 0, got ${this.auditMaxLen}`);
    if ((client as { isCluster?: boolean }).isCluster && this.auditMaxLen > 0) {
      throw new RangeError("on Redis Cluster the audit stream and the records live in different slots: pass auditMaxLen: 0 (records alone work on a cluster)");
    }
  }

  /** Record name of a key: `<prefix>:idem:<digest>`. */
  recordOf(key: string): string {
    return `${this.namespace.prefix}:idem:${recordDigest(this.scope, key)}`;
  }

  /**
   * A lease handed over from another process or language (a job queue, a worker): its key
   * and fencing token. The scripts check the token, so a stale hand-over is refused.
   */
  resume(key: string, token: bigint): Lease {
    checkKey(key, this.maxKeyLength);
    return { key, record: this.recordOf(key), token, fingerprint: "", guarded: true };
  }

  get auditStream(): string {
    return `${this.namespace.prefix}:idem-audit`;
  }

  private keys(record: string): string[] {
    return this.auditMaxLen ? [record, this.auditStream] : [record];
  }

  /**
   * Start the operation of `key`, or learn why not. `fp` identifies the request (e.g. its
   * body): a retry must send the same; another one answers "mismatch".
   * Throws IdempotencyKeyError (bad key) or IdempotencyUnavailable (Redis down, closed).
   */
  async begin(key: string, fp: Buffer | string = ""): Promise<BeginResult> {
    try {
      checkKey(key, this.maxKeyLength);
    } catch (err) {
      this.stats.badInput++;
      throw err;
    }
    const f = fingerprint(fp);
    const record = this.recordOf(key);
    let reply: Reply;
    try {
      reply = await BEGIN.run(this.client, this.keys(record), [f, Math.round(this.leaseMs), Math.round(this.ttlMs), key, this.auditMaxLen, ""]);
    } catch (err) {
      this.tolerate(err, "begin");
      this.stats.new++;
      return { outcome: "new", lease: { key, record, token: 0n, fingerprint: f, guarded: false }, failed: false, retryAfterMs: 0, takeover: false };
    }
    const kind = s(reply[0]);
    if (kind === "new") {
      const takeover = s(reply[2]) === "takeover";
      const lease = { key, record, token: BigInt(s(reply[1])), fingerprint: f, guarded: true };
      const fromStore = this.store ? await this.fromStore(this.store, lease) : null;
      if (fromStore) return fromStore;
      this.stats.new++;
      if (takeover) this.stats.takeovers++;
      return { outcome: "new", lease, failed: false, retryAfterMs: 0, takeover };
    }
    if (kind === "busy") {
      this.stats.inProgress++;
      return { outcome: "in_progress", failed: false, retryAfterMs: Math.max(1, Number(reply[2])), takeover: false };
    }
    if (kind === "done" || kind === "failed") {
      this.stats.done++;
      const res = reply[2];
      return { outcome: "done", result: Buffer.isBuffer(res) ? res : Buffer.alloc(0), failed: kind === "failed", retryAfterMs: 0, takeover: false };
    }
    if (kind === "mismatch") {
      this.stats.mismatch++;
      return { outcome: "mismatch", failed: false, retryAfterMs: 0, takeover: false };
    }
    throw new Error(`unexpected reply from the begin script: ${reply.map(s).join(" ")}`);
  }

  /**
   * The final result stored for `key` and the same fingerprint, read only (one HMGET), or
   * null when there is none (no record, still running, another request): unlike begin it
   * never takes a lease. The HTTP middleware reads records of the old unscoped key space
   * with it during the transition window.
   */
  async peek(key: string, fp: Buffer | string = ""): Promise<BeginResult | null> {
    checkKey(key, this.maxKeyLength);
    let reply: (Buffer | null)[];
    try {
      reply = await this.client.hmgetBuffer(this.recordOf(key), "st", "fp", "res");
    } catch (err) {
      this.tolerate(err, "peek");
      return null;
    }
    const [st, recFp, res] = reply.map((b) => (b === null ? null : b));
    const state = st?.toString("latin1");
    if ((state !== "D" && state !== "F") || recFp === null || recFp.toString("latin1") !== fingerprint(fp)) return null;
    return { outcome: "done", result: res ?? Buffer.alloc(0), failed: state === "F", retryAfterMs: 0, takeover: false };
  }

  /** Redis had no record (a "new"): did it forget a final result the store has? */
  private async fromStore(store: IdempotencyStore, lease: Lease): Promise<BeginResult | null> {
    let stored: StoredFinal | null;
    try {
      stored = await store.get(recordDigest(this.scope, lease.key));
    } catch (err) {
      if (this.onError === "closed") await this.abandon(lease);
      this.tolerate(err, "store lookup");
      return null; // failing open: Redis still guards the key
    }
    if (stored === null) return null;
    this.stats.storeReplays++;
    if (stored.fingerprint !== lease.fingerprint) {
      await this.abandon(lease);
      this.stats.mismatch++;
      return { outcome: "mismatch", failed: false, retryAfterMs: 0, takeover: false };
    }
    await this.writeRedis(lease, stored.result, stored.failed ? "F" : "D", false).catch(() => undefined); // Redis learns it again
    this.stats.done++;
    return { outcome: "done", result: stored.result, failed: stored.failed, retryAfterMs: 0, takeover: false };
  }

  /**
   * Store `result` (DONE) and end the lease. Throws LeaseLostError if it was taken over, or
   * if the record is gone and there is no store; with a store, a result whose record Redis
   * lost is written to the store anyway (its unique key is the fence), and
   * DuplicateCompletionError says the store holds another completion of the key.
   */
  complete(lease: Lease, result: Buffer | string = ""): Promise<void> {
    return this.finish(lease, result, "D");
  }

  /** Record a final failure that retries see too (e.g. payment declined). */
  fail(lease: Lease, result: Buffer | string = ""): Promise<void> {
    return this.finish(lease, result, "F");
  }

  private async finish(lease: Lease, result: Buffer | string, st: "D" | "F"): Promise<void> {
    const res = typeof result === "string" ? Buffer.from(result, "utf8") : result;
    const store = this.store;
    if (!store || !lease.guarded) return this.writeRedis(lease, res, st, false);
    try {
      await this.writeRedis(lease, res, st, false);
    } catch (err) {
      if (!(err instanceof LeaseLostError && err.reason === "gone")) throw err; // taken over: that holder completes
    }
    let winner: StoredFinal;
    try {
      winner = await store.put({ digest: recordDigest(this.scope, lease.key), key: lease.key, fingerprint: lease.fingerprint, failed: st === "F", token: lease.token, result: res });
    } catch (err) {
      this.tolerate(err, "store write");
      return;
    }
    if (winner.token !== lease.token) {
      await this.writeRedis(lease, winner.result, winner.failed ? "F" : "D", true).catch(() => undefined); // gone: begin reads the store
      this.stats.duplicates++;
      throw new DuplicateCompletionError(lease.key, winner);
    }
  }

  private writeRedis(lease: Lease, res: Buffer, st: "D" | "F", repair: boolean): Promise<void> {
    return this.fenced(COMPLETE, "complete", lease, this.keys(lease.record), [lease.token.toString(), st, res, Math.round(this.ttlMs), this.auditMaxLen, repair ? "repair" : ""]);
  }

  /** Renew the lease for `ms` (default: the configured lease) from now. */
  extend(lease: Lease, ms?: number): Promise<void> {
    return this.fenced(EXTEND, "extend", lease, [lease.record], [lease.token.toString(), Math.max(1, Math.round(ms ?? this.leaseMs))]);
  }

  /** Give the key back (PROCESSING -> NEW): the next caller runs it. For retryable failures. */
  release(lease: Lease): Promise<void> {
    return this.fenced(RELEASE, "release", lease, this.keys(lease.record), [lease.token.toString(), this.auditMaxLen]);
  }

  /** Release, ignoring a lost lease or an outage (the lease runs out anyway). */
  async abandon(lease: Lease): Promise<void> {
    try {
      await this.release(lease);
    } catch {
      // the lease runs out on its own
    }
  }

  /**
   * Renew `lease` every `everyMs` (a third of the lease) until `stop()`. `signal` aborts
   * when a renewal was refused (another caller took over): stop working, complete() will
   * be refused. A Redis failure is retried at the next beat.
   */
  keepAlive(lease: Lease, everyMs?: number): KeepAlive {
    return new KeepAlive(this, lease, everyMs ?? this.leaseMs / 3);
  }

  private async fenced(script: Script, op: string, lease: Lease, keys: string[], args: (string | number | Buffer)[]): Promise<void> {
    if (!lease.guarded) return; // failed open: nothing in Redis to update
    let reply: Reply;
    try {
      reply = await script.run(this.client, keys, args);
    } catch (err) {
      this.tolerate(err, op);
      return;
    }
    if (s(reply[0]) === "ok") return;
    this.stats.leaseLost++;
    throw new LeaseLostError(op, lease.key, lease.token, s(reply[1]));
  }

  private tolerate(err: unknown, op: string): void {
    this.stats.unavailable++;
    this.onRedisError?.(op, err);
    if (this.onError === "closed") {
      throw new IdempotencyUnavailable(`idempotency guard unavailable (${op}): ${(err as Error)?.message ?? err}`, { cause: err });
    }
  }
}

/** Background renewal of one lease (see IdempotencyGuard.keepAlive). */
export class KeepAlive {
  beats = 0;
  lost: LeaseLostError | undefined;
  private readonly ac = new AbortController();
  private readonly timer: NodeJS.Timeout | undefined;
  private inflight: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(private readonly guard: IdempotencyGuard, private readonly lease: Lease, everyMs: number) {
    if (!(everyMs > 0 && everyMs < guard.leaseMs)) throw new RangeError(`everyMs must be in (0, leaseMs), got ${everyMs}`);
    if (!lease.guarded) return;
    this.timer = setInterval(() => {
      if (this.stopped) return;
      this.inflight = this.inflight.then(() => this.beat());
    }, everyMs);
    this.timer.unref?.();
  }

  /** Aborted when the lease was lost. */
  get signal(): AbortSignal {
    return this.ac.signal;
  }

  private async beat(): Promise<void> {
    if (this.stopped) return;
    try {
      await this.guard.extend(this.lease);
      this.beats++;
      this.guard.stats.renewals++;
    } catch (err) {
      if (err instanceof LeaseLostError) {
        this.lost = err;
        this.stopped = true;
        clearInterval(this.timer);
        this.ac.abort(err);
      } // Redis down: try again at the next beat
    }
  }

  /** Stop renewing; resolves when no renewal is in flight any more. */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.inflight;
  }
}
