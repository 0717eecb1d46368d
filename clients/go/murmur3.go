package hotkeyd

import "math/bits"

// Murmur3_32 is MurmurHash3 x86_32, identical to Python's mmh3.hash(data, seed, signed=False)
// and the C core of the daemon. The reporter routes keys to partitions with it.
func Murmur3_32(data []byte, seed uint32) uint32 {
	const c1, c2 = 0xcc9e2d51, 0x1b873593
	h := seed
	n := len(data)
	i := 0
	for ; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
		h = bits.RotateLeft32(h, 13)
		h = h*5 + 0xe6546b64
	}
	var k uint32
	switch n & 3 {
	case 3:
		k ^= uint32(data[i+2]) << 16
		fallthrough
	case 2:
		k ^= uint32(data[i+1]) << 8
		fallthrough
	case 1:
		k ^= uint32(data[i])
		k *= c1
		k = bits.RotateLeft32(k, 15)
		k *= c2
		h ^= k
	}
	h ^= uint32(n)
	h ^= h >> 16
	h *= 0x85ebca6b
	h ^= h >> 13
	h *= 0xc2b2ae35
	h ^= h >> 16
	return h
}

// PartitionFor is the Kafka partition the reporter sends key to:
// murmur3_32(key, seed 0) mod partitions, as in every hotkeyd reporter.
func PartitionFor(key []byte, partitions int) int {
	return int(Murmur3_32(key, 0) % uint32(partitions))
}
