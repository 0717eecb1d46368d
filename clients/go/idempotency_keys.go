package hotkeyd

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
)

// MaxIdempotencyKeyHeader is the longest key a client may send in an Idempotency-Key
// header (idempotency_key_chars_max in spec/limits.json); the guard itself accepts
// IdempotencyOptions.MaxKeyLength for keys code builds.
var MaxIdempotencyKeyHeader int

func init() {
	l, err := parseLimits(limitsJSON)
	if err != nil {
		panic(err)
	}
	MaxIdempotencyKeyHeader = int(l.int("idempotency_key_chars_max"))
}

// digest32: 32 hex digits of SHA-256 over length-prefixed parts, as every hotkeyd client.
func digest32(parts ...[]byte) string {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// IdempotencyFingerprint is the fixed-length fingerprint of a request's parts (e.g.
// method, path, query, body): what the guard compares to tell a retry from a reused key.
func IdempotencyFingerprint(parts ...[]byte) string { return digest32(parts...) }

// RecordDigest is the fixed-length name of key within scope (what Redis sees).
func RecordDigest(scope, key string) string { return digest32([]byte(scope), []byte(key)) }

// CheckIdempotencyKey reports whether key is 1..maxLen printable ASCII characters; the
// error wraps ErrIdempotencyKey.
func CheckIdempotencyKey(key string, maxLen int) error {
	if key == "" {
		return fmt.Errorf("%w: idempotency key is empty", ErrIdempotencyKey)
	}
	if len(key) > maxLen {
		return fmt.Errorf("%w: idempotency key is %d characters; at most %d are allowed", ErrIdempotencyKey, len(key), maxLen)
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("%w: idempotency key must be printable ASCII (0x20-0x7E)", ErrIdempotencyKey)
		}
	}
	return nil
}
