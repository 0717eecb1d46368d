package hotkeyd

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

// The seed corpus of every target below is also in testdata/fuzz/<target>/, built from
// spec/vectors (hostile.json, limits.json) by tests/spec/go_corpus.py: plain `go test`
// replays it, so each vector is a regression test of the target's invariants too.

// FuzzDecodeMessage: whatever arrives on the channel, the decoder returns a message or
// an error, never panics, and what it accepts is well formed.
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte(`{"v":1,"instance":"d","seq":1,"ts":1.5,"full":false,"final":false,"hot":[{"key":"a","rate":1,"rule":"r","ttl_ms":5}],"cool":[{"key":"//4A","enc":"base64","db":2}]}`))
	f.Add([]byte(`{"v":1,"instance":"d","seq":9007199254740993,"ts":1e308,"hot":[1],"cool":null}`))
	f.Add([]byte(`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[`))
	f.Add([]byte(`{"v":1,"instance":"","seq":-1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, bad, err := DecodeMessage(data)
		if err != nil {
			return
		}
		if bad < 0 || msg.Instance == "" || msg.Seq < 0 {
			t.Fatalf("accepted a malformed message: %+v", msg)
		}
		for _, h := range msg.Hot {
			if h.TTLms < 0 || h.DB < 0 {
				t.Fatalf("accepted a malformed entry: %+v", h)
			}
		}
		hs := NewHotSet(HotSetOptions{})
		hs.Apply(msg, true)
		if hs.Len() > len(msg.Hot) {
			t.Fatal("more keys than announced")
		}
		_, _ = json.Marshal(EncodeKey(data))
	})
}

// FuzzDecodeInvalidation: never panics; decoded keys re-encode to the same bytes.
func FuzzDecodeInvalidation(f *testing.F) {
	f.Add([]byte(`{"v":1,"origin":"o","keys":[{"key":"a"},{"key":"AAE=","enc":"base64"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, keys, err := DecodeInvalidation(data)
		if err != nil {
			return
		}
		for _, k := range keys {
			w := EncodeKey(k)
			enc, _ := w["enc"].(string)
			back, err := DecodeKey(w["key"].(string), enc)
			if err != nil || string(back) != string(k) {
				t.Fatalf("key %q does not round-trip", k)
			}
		}
	})
}

// FuzzDecodeSnapshot: a snapshot (full=true) replaces an instance's keys; whatever its
// bytes, decoding and applying it never panics and keeps no key it did not announce.
func FuzzDecodeSnapshot(f *testing.F) {
	f.Add([]byte(`{"v":1,"instance":"d","seq":3,"ts":1.5,"full":true,"final":false,"hot":[{"key":"a","rate":1,"rule":"r","ttl_ms":5}],"cool":[],"top":[]}`))
	f.Add([]byte(`{"v":1,"instance":"huge","seq":1,"ts":1111111111111111111111111111111111111111,"full":true,"hot":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, _, err := DecodeMessage(data)
		if err != nil {
			return
		}
		if math.IsNaN(msg.TS) || math.IsInf(msg.TS, 0) || msg.Seq > MaxSeq {
			t.Fatalf("accepted an out-of-range envelope: %+v", msg)
		}
		hs := NewHotSet(HotSetOptions{})
		hs.Apply(msg, true)
		hs.Apply(msg, true) // the same snapshot again changes nothing
		if hs.Len() > len(msg.Hot) {
			t.Fatal("more keys than the snapshot holds")
		}
	})
}

// FuzzEncodeDemand: Go sends demand reports (the daemon decodes them). Whatever the key
// bytes, app and count, the report is one strict JSON object (the rule of every decoder),
// within MaxDemandBytes, and its key decodes back to the same bytes.
func FuzzEncodeDemand(f *testing.F) {
	f.Add("app-1", []byte("item:1"), uint64(120))
	f.Add("\xff", []byte{0xff, 0xfe, 0}, uint64(math.MaxUint64))
	f.Fuzz(func(t *testing.T, app string, key []byte, n uint64) {
		if n == 0 || len(key) > 4096 {
			return
		}
		payload, entries, _ := EncodeDemand(app, 1, 1764480000.25, 250*time.Millisecond,
			[]DemandCount{{Key: Key{Bytes: string(key)}, N: n}})
		if entries != 1 {
			t.Fatalf("%d entries", entries)
		}
		doc, err := decodeStrict(payload)
		if err != nil {
			t.Fatalf("not strict JSON (%v): %q", err, payload)
		}
		if len(payload) > MaxDemandBytes && len(key) < 1024 {
			t.Fatalf("%d bytes", len(payload))
		}
		e := doc["entries"].([]any)[0].(map[string]any)
		enc, _ := e["enc"].(string)
		back, err := DecodeKey(e["key"].(string), enc)
		if err != nil || string(back) != string(key) {
			t.Fatalf("key %q does not round-trip", key)
		}
		if c, _ := e["n"].(json.Number).Int64(); uint64(c) > MaxReportCount {
			t.Fatalf("count %d above the limit", c)
		}
	})
}
