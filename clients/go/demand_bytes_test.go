package hotkeyd

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// Long keys: a report stays under MaxDemandBytes (receivers drop a larger one whole), the
// heaviest entries kept and the rest counted as dropped.
func TestDemandReportStaysUnderTheByteBound(t *testing.T) {
	items := make([]DemandCount, 1000)
	var total uint64
	for i := range items { // 1,000 binary keys of 1 KiB: ~1.4 MB as base64
		key := []byte(strings.Repeat("\xff", 1024))
		key[0], key[1] = byte(i>>8), byte(i)
		items[i] = DemandCount{Key: Key{Bytes: string(key)}, N: uint64(10_000 + i)}
		total += uint64(10_000 + i)
	}
	payload, kept, dropped := EncodeDemand("app", 1, 0, 250*time.Millisecond, items)
	if len(payload) > MaxDemandBytes {
		t.Fatalf("payload of %d bytes", len(payload))
	}
	var msg struct {
		Entries []struct{ N uint64 } `json:"entries"`
	}
	if err := json.Unmarshal(payload, &msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Entries) != kept || kept < 50 || kept >= 1000 { // 128 KiB: ~90 of these keys
		t.Fatalf("kept %d, entries %d", kept, len(msg.Entries))
	}
	var sent, least uint64 = 0, ^uint64(0)
	for _, e := range msg.Entries {
		sent += e.N
		least = min(least, e.N)
	}
	if sent+dropped != total || least != uint64(10_000+1000-kept) {
		t.Fatalf("sent %d + dropped %d != %d, or lightest kept %d", sent, dropped, total, least)
	}
}
