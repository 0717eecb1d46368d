// Package hotkeyd is the Go client of hotkeyd, the hot-key detection daemon for Redis.
//
// The daemon watches Redis traffic (a MONITOR tap, Kafka, files) and announces keys that
// turn hot on a pub/sub channel, with a snapshot per daemon instance for late joiners.
// This package follows those announcements and acts on them:
//
//   - [Subscriber] keeps the merged hot set of every daemon instance (subscribe first,
//     then read the snapshots, then apply messages per instance in sequence order; a gap
//     resyncs from the snapshot).
//   - [HotCache] wraps a go-redis [redis.UniversalClient] (single node or Cluster) and
//     serves hot keys from process memory, single-flight refreshed, bounded by entries and
//     bytes; writes broadcast an invalidation; reads served locally are reported to the
//     daemon as demand so the key stays hot while the load lasts (the closed loop).
//   - [ShardedCounter] splits a write-hot counter over several keys with the shared Lua.
//   - [Reporter] pre-aggregates key accesses and sends them to Kafka, partitioned exactly
//     like the Python and Java reporters.
//
// The wire contract (schemas, Lua, conformance vectors) lives in the repository's spec/
// folder; this package's tests run the same vectors as every other client.
package hotkeyd
