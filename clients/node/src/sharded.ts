/**
 * ShardedCounter: a write-hot counter (stock, likes, quota) split over several keys,
 * with the Lua scripts every hotkeyd client shares (spec/lua, copied in at build time).
 *
 * take() never oversells, and never answers "sold out" while enough stock remains:
 * - default: the shard keys share the hash tag {key} (one cluster slot) and one script
 *   checks the total and takes atomically;
 * - spread: the shards live in different slots; take() reserves units shard by shard
 *   under a token with a lease, then commits them, or releases them when the stock is
 *   short. A caller that dies mid-take leaves holds that return when the lease runs out.
 */
import { randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import calculateSlot from "cluster-key-slot";
import { keyBytes } from "./keys.js";
import { shardOf } from "./murmur3.js";
import type { RedisLike } from "./subscriber.js";

const LUA_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "lua");
const lua = (name: string) => readFileSync(join(LUA_DIR, name), "utf8");
const TAKE_ALL = lua("sharded_take_all.lua");
const RESERVE = lua("sharded_reserve.lua");
const SETTLE = lua("sharded_settle.lua");

/** A spread-mode take failed after committing units it could not give back. */
export class PartialTakeError extends Error {
  override name = "PartialTakeError";
  constructor(
    message: string,
    readonly taken: number,
    readonly wanted: number,
  ) {
    super(message);
  }
}

export interface ShardedCounterOptions {
  shards?: number; // 8 (1..1024)
  /** spread the shards over cluster slots (and nodes) instead of one hash tag */
  spread?: boolean;
  leaseMs?: number; // 5000
  /** longest a take retries while other callers hold the units it needs (2*lease+1s) */
  waitMs?: number;
}

/** The hash of in-flight holds beside a shard key, in the same cluster slot. */
export function holdsKey(shard: string): string {
  const cand = `{${shard}}:held`;
  return calculateSlot(cand) === calculateSlot(shard) ? cand : `${shard}:held`;
}

export class ShardedCounter {
  readonly keys: string[];
  readonly holds: string[];
  private readonly spread: boolean;
  private readonly leaseMs: number;
  private readonly waitMs: number;

  constructor(
    readonly client: RedisLike,
    readonly key: string,
    opts: ShardedCounterOptions = {},
  ) {
    const shards = opts.shards ?? 8;
    if (!Number.isInteger(shards) || shards < 1 || shards > 1024) throw new RangeError(`shards must be in 1..1024, got ${shards}`);
    this.spread = opts.spread ?? false;
    this.leaseMs = opts.leaseMs ?? 5000;
    this.waitMs = opts.waitMs ?? 2 * this.leaseMs + 1000;
    this.keys = Array.from({ length: shards }, (_, i) => (this.spread ? `${key}:shard:${i}` : `{${key}}:${i}`));
    this.holds = this.spread ? this.keys.map(holdsKey) : [];
  }

  /** The shard a caller id goes to first (stable across processes and languages). */
  shardOf(callerId: unknown): number {
    return shardOf(keyBytes(callerId), this.keys.length);
  }

  async incr(callerId: unknown, amount = 1): Promise<number> {
    return this.client.incrby(this.keys[this.shardOf(callerId)], amount);
  }

  /** The total over all shards, units held by takes in flight included. */
  async value(): Promise<number> {
    const vals = await Promise.all(this.keys.map((k) => this.client.get(k)));
    let total = vals.reduce((s, v) => s + (v === null ? 0 : Number(v)), 0);
    if (this.spread) {
      const held = await Promise.all(this.holds.map((h) => this.client.hvals(h)));
      for (const hs of held) for (const h of hs) total += Number(h.split(":")[0]) || 0;
    }
    return total;
  }

  /** Spread total evenly over the shards (and drop holds in flight). */
  async setTotal(total: number): Promise<void> {
    if (!Number.isInteger(total) || total < 0) throw new RangeError(`total must be an integer >= 0, got ${total}`);
    const n = this.keys.length;
    await Promise.all(this.keys.map((k, i) => this.client.set(k, Math.floor(total / n) + (i < total % n ? 1 : 0))));
    if (this.spread) await Promise.all(this.holds.map((h) => this.client.del(h)));
  }

  /**
   * Take amount units if that much remains in total (gathered over the shards, the
   * caller's first). Returns the total left, or null when short (nothing taken).
   */
  async take(callerId: unknown, amount = 1): Promise<number | null> {
    if (!Number.isInteger(amount) || amount < 1) throw new RangeError(`amount must be an integer >= 1, got ${amount}`);
    const first = this.shardOf(callerId);
    if (!this.spread) {
      const left = Number(await this.client.eval(TAKE_ALL, this.keys.length, ...this.keys, first, amount));
      return left < 0 ? null : left;
    }
    return this.takeSpread(first, amount);
  }

  private async takeSpread(first: number, amount: number): Promise<number | null> {
    const token = randomBytes(16).toString("hex");
    const deadline = Date.now() + this.waitMs;
    const n = this.keys.length;
    let delay = 1;
    for (;;) {
      const held = new Map<number, number>();
      let total = 0;
      let free = 0;
      let others = 0;
      try {
        for (let j = 0; j < n && total < amount; j++) {
          const i = (first + j) % n;
          const [got, left, busy] = (await this.client.eval(RESERVE, 2, this.keys[i], this.holds[i], token, amount - total, this.leaseMs)) as number[];
          if (got > 0) {
            held.set(i, (held.get(i) ?? 0) + got);
            total += got;
          }
          free += Math.max(0, left);
          others += busy;
        }
      } catch (e) {
        await this.settle(token, [...held.keys()], "release").catch(() => {}); // else: the lease
        throw e;
      }
      if (total === amount) return this.commit(token, held, amount);
      await this.settle(token, [...held.keys()], "release");
      if (total + free + others < amount) return null;
      if (Date.now() > deadline) throw new Error(`take(${amount}) on ${this.key}: other callers held the units for longer than ${this.waitMs} ms; nothing was taken`);
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 50);
    }
  }

  private async settle(token: string, shards: number[], how: "commit" | "release"): Promise<number[]> {
    const out: number[] = [];
    for (const i of shards) out.push(Number(await this.client.eval(SETTLE, 2, this.keys[i], this.holds[i], token, how)));
    return out;
  }

  private async commit(token: string, held: Map<number, number>, amount: number): Promise<number> {
    const committed = new Map<number, number>();
    let cause: unknown = null;
    for (const i of held.keys()) {
      try {
        committed.set(i, (await this.settle(token, [i], "commit"))[0]);
      } catch (e) {
        cause = e;
        break;
      }
    }
    const taken = [...committed.values()].reduce((a, b) => a + b, 0);
    if (cause === null && taken === amount) return this.value();
    if (cause !== null) await this.settle(token, [...held.keys()].filter((i) => !committed.has(i)), "release").catch(() => {});
    const why = cause === null ? "a reservation outlived its lease" : String(cause);
    try {
      await Promise.all([...committed].filter(([, u]) => u > 0).map(([i, u]) => this.client.incrby(this.keys[i], u)));
    } catch {
      throw new PartialTakeError(`take(${amount}) on ${this.key} failed (${why}) after taking ${taken} unit(s), which could not be given back`, taken, amount);
    }
    throw new PartialTakeError(`take(${amount}) on ${this.key} failed (${why}); nothing was taken`, 0, amount);
  }

  async clear(): Promise<void> {
    await Promise.all([...this.keys, ...this.holds].map((k) => this.client.del(k)));
  }
}
