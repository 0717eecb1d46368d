/**
 * ShardedCounter: a write-hot counter (stock, likes, quota) split over several keys,
 * with the Lua scripts every hotkeyd client shares (spec/lua).
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { keyBytes } from "./keys.js";
import { shardOf } from "./murmur3.js";
import type { RedisLike } from "./subscriber.js";

const LUA_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "lua");

function lua(name: string): string {
  return readFileSync(join(LUA_DIR, name), "utf8");
}

export interface ShardedCounterOptions {
  shards?: number; // 8
  /** put {key} in every shard key so they share a cluster slot (one-script take) */
  hashTag?: boolean;
}

export class ShardedCounter {
  readonly keys: string[];
  readonly shards: number;
  readonly hashTag: boolean;
  private static readonly takeAll = lua("sharded_take_all.lua");
  private static readonly takeOne = lua("sharded_take_one.lua");

  constructor(
    readonly client: RedisLike,
    readonly key: string,
    opts: ShardedCounterOptions = {},
  ) {
    this.shards = opts.shards ?? 8;
    if (!Number.isInteger(this.shards) || this.shards < 1 || this.shards > 1024) {
      throw new RangeError(`shards must be in 1..1024, got ${this.shards}`);
    }
    this.hashTag = opts.hashTag ?? true;
    this.keys = Array.from({ length: this.shards }, (_, i) => (this.hashTag ? `{${key}}:${i}` : `${key}:shard:${i}`));
  }

  /** The shard a caller id goes to first (stable across processes and languages). */
  shardOf(callerId: unknown): number {
    return shardOf(keyBytes(callerId), this.shards);
  }

  async incr(callerId: unknown, amount = 1): Promise<number> {
    return this.client.incrby(this.keys[this.shardOf(callerId)], amount);
  }

  /** The total over all shards (one GET per shard: the keys may live on several nodes). */
  async value(): Promise<number> {
    const vals = await Promise.all(this.keys.map((k) => this.client.get(k)));
    return vals.reduce((s, v) => s + (v === null ? 0 : Number(v)), 0);
  }

  /** Spread total evenly over the shards. */
  async setTotal(total: number): Promise<void> {
    if (!Number.isInteger(total) || total < 0) throw new RangeError(`total must be an integer >= 0, got ${total}`);
    const base = Math.floor(total / this.shards);
    const extra = total % this.shards;
    await Promise.all(this.keys.map((k, i) => this.client.set(k, base + (i < extra ? 1 : 0))));
  }

  /**
   * Take amount if that much remains in total. Returns the total left afterwards, or
   * null when short (nothing taken). Never oversells.
   */
  async take(callerId: unknown, amount = 1): Promise<number | null> {
    if (!Number.isInteger(amount) || amount < 1) throw new RangeError(`amount must be an integer >= 1, got ${amount}`);
    const first = this.shardOf(callerId);
    if (this.hashTag) {
      const left = Number(await this.client.eval(ShardedCounter.takeAll, this.keys.length, ...this.keys, first, amount));
      return left < 0 ? null : left;
    }
    for (let j = 0; j < this.shards; j++) {
      const k = this.keys[(first + j) % this.shards];
      if (Number(await this.client.eval(ShardedCounter.takeOne, 1, k, amount)) >= 0) return this.value();
    }
    return null;
  }

  async clear(): Promise<void> {
    await Promise.all(this.keys.map((k) => this.client.del(k)));
  }
}
