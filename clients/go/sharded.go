package hotkeyd

const shardSeed = 0x5EED

// ShardOf is the shard a caller id goes to first: murmur3_32(id, 0x5EED) mod shards, as in
// every hotkeyd ShardedCounter.
func ShardOf(callerID []byte, shards int) int {
	return int(Murmur3_32(callerID, shardSeed) % uint32(shards))
}
