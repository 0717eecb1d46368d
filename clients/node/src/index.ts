export { AUTH_ENV_VAR, DEMAND_KEY_ENV_VAR, DEMAND_KEY_FILE_ENV_VAR, MessageAuth, MIN_KEY_BYTES } from "./auth.js";
export { HotCache, type CacheOptions, type CacheStats } from "./cache.js";
export { HotSet, keyId, systemClock, type ApplyResult, type Clock, type HotItem, type HotSetOptions } from "./hotset.js";
export { decodeHeartbeat, InvalidationIntake, WATCH_LEASE_MS, WatchLeases, type Consistency, type Guard, type Heartbeat, type IntakeStats, type WatchStats } from "./watch.js";
export { keyBytes, KeyError, pyFloatRepr, type KeyInput } from "./keys.js";
export { murmur3, partitionFor, shardOf, SHARD_SEED } from "./murmur3.js";
export { encodeCounts, encodeMessages, MAX_REPORT_COUNT, Reporter, type ReportMessage, type ReporterOptions, type ReporterStats } from "./reporter.js";
export { holdsKey, PartialTakeError, ShardedCounter, type ShardedCounterOptions } from "./sharded.js";
export { HotkeydUnreachableError, Subscriber, type RedisLike, type SubscriberOptions, type SubscriberStats } from "./subscriber.js";
export {
  buildDemandReports, decodeInvalidation, decodeKey, decodeMessage, encodeInvalidation, encodeKey,
  MAX_DEMAND_ENTRIES, MAX_DEPTH, MAX_ENTRIES, MAX_SEQ, MAX_TTL_MS, Namespace, WIRE_VERSION, WireError,
  type CoolEntry, type DemandRead, type DemandReport, type HotEntry, type Key, type Message, type WireKey,
} from "./wire.js";
export * from "./idempotency/index.js";
