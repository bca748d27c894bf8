package api

import "encoding/binary"

// murmur2Seed is the seed Kafka's Utils.murmur2 uses.
const murmur2Seed = 0x9747b28c

// Murmur2 is the 32-bit MurmurHash2 exactly as Kafka's Utils.murmur2 computes it:
// seed 0x9747b28c, little-endian 4-byte words, and the result read as a signed
// int. Producers partition keyed records with it, so a key lands on the same
// partition whichever client, Kafka's or ours, produced it.
func Murmur2(key []byte) int32 {
	const (
		m = 0x5bd1e995
		r = 24
	)
	h := uint32(murmur2Seed) ^ uint32(len(key))
	for len(key) >= 4 {
		k := binary.LittleEndian.Uint32(key)
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
		key = key[4:]
	}
	// The tail, in the order of Kafka's fall-through switch.
	switch len(key) {
	case 3:
		h ^= uint32(key[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(key[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(key[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// KeyPartition is the partition Kafka's default partitioner picks for a non-null
// key among numPartitions: the Murmur2 hash with its sign bit cleared (Kafka's
// Utils.toPositive, not an absolute value) modulo the partition count. Records
// with a null key are not hashed by Kafka; the caller spreads those itself.
// numPartitions must be positive; like a division by zero, anything else panics.
func KeyPartition(key []byte, numPartitions int) int {
	if numPartitions <= 0 {
		panic("api.KeyPartition: numPartitions must be positive")
	}
	return int(uint32(Murmur2(key))&0x7fffffff) % numPartitions
}
