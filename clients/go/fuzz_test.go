package hotkeyd

import (
	"encoding/json"
	"testing"
)

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
