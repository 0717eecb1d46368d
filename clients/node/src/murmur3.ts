/** MurmurHash3 x86_32, identical to Python's mmh3.hash(data, seed, signed=False). */
export function murmur3(data: Uint8Array, seed = 0): number {
  const c1 = 0xcc9e2d51;
  const c2 = 0x1b873593;
  let h = seed >>> 0;
  const n = data.length;
  const blocks = n & ~3;
  let k: number;
  for (let i = 0; i < blocks; i += 4) {
    k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24);
    k = Math.imul(k, c1);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, c2);
    h ^= k;
    h = (h << 13) | (h >>> 19);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  const rest = n & 3;
  if (rest > 0) {
    k = 0;
    if (rest === 3) k ^= data[blocks + 2] << 16;
    if (rest >= 2) k ^= data[blocks + 1] << 8;
    k ^= data[blocks];
    k = Math.imul(k, c1);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, c2);
    h ^= k;
  }
  h ^= n;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The Kafka partition every hotkeyd reporter sends key to. */
export function partitionFor(key: Uint8Array, partitions: number): number {
  return murmur3(key, 0) % partitions;
}

export const SHARD_SEED = 0x5eed;

/** The shard ShardedCounter tries first for a caller id. */
export function shardOf(callerId: Uint8Array, shards: number): number {
  return murmur3(callerId, SHARD_SEED) % shards;
}
