package hotkeyd

// The shared conformance vectors (spec/vectors, described in spec/README.md): a client is
// supported when it passes every one of them.

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"testing"
	"time"
)

func specPath(t *testing.T, name string) string {
	t.Helper()
	p := filepath.Join("..", "..", "spec", "vectors", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("conformance vectors not found at %s: %v", p, err)
	}
	return p
}

func loadVectors(t *testing.T, name string, into any) {
	t.Helper()
	raw, err := os.ReadFile(specPath(t, name))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(into); err != nil {
		t.Fatal(err)
	}
}

type wireKey struct {
	Key any    `json:"key"`
	Enc string `json:"enc"`
	DB  int    `json:"db"`
}

func (w wireKey) decode() ([]byte, error) {
	s, ok := w.Key.(string)
	if !ok {
		return nil, wireErr("key is not a string")
	}
	return DecodeKey(s, w.Enc)
}

func mustKey(t *testing.T, w wireKey) Key {
	t.Helper()
	b, err := w.decode()
	if err != nil {
		t.Fatalf("vector key %v: %v", w, err)
	}
	return Key{string(b), w.DB}
}

// ---------------------------------------------------------------- keys.json
func TestConformanceKeys(t *testing.T) {
	var v struct {
		Encode []struct {
			Name  string          `json:"name"`
			Input json.RawMessage `json:"input"`
			Hex   *string         `json:"bytes_hex"`
			Wire  map[string]any  `json:"wire"`
			Error string          `json:"error"`
		} `json:"encode"`
		Decode []struct {
			Name  string  `json:"name"`
			Wire  wireKey `json:"wire"`
			Hex   string  `json:"bytes_hex"`
			Error bool    `json:"error"`
		} `json:"decode"`
	}
	loadVectors(t, "keys.json", &v)
	for _, c := range v.Encode {
		var in struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
			Hex   string          `json:"hex"`
		}
		if err := json.Unmarshal(c.Input, &in); err != nil {
			t.Fatal(err)
		}
		var key any
		switch in.Type {
		case "str":
			if c.Error == "value" {
				// Go strings are byte strings; a lone UTF-16 surrogate cannot occur in one.
				continue
			}
			var s string
			_ = json.Unmarshal(in.Value, &s)
			key = s
		case "int":
			n, err := strconv.ParseInt(string(in.Value), 10, 64)
			if err != nil {
				t.Fatalf("%s: %v", c.Name, err)
			}
			key = n
		case "float":
			f, _ := strconv.ParseFloat(string(in.Value), 64)
			key = f
		case "bytes":
			b, _ := hex.DecodeString(in.Hex)
			key = b
		case "bool":
			key = true
		case "null":
			key = nil
		case "list":
			key = []string{"a"}
		}
		got, err := KeyBytes(key)
		if c.Error != "" {
			if err == nil {
				t.Errorf("%s: KeyBytes(%v) accepted, want a %s error", c.Name, key, c.Error)
			}
			continue
		}
		if err != nil || hex.EncodeToString(got) != *c.Hex {
			t.Errorf("%s: KeyBytes(%v) = %x, %v; want %s", c.Name, key, got, err, *c.Hex)
			continue
		}
		if wire := EncodeKey(got); !reflect.DeepEqual(wire, c.Wire) {
			t.Errorf("%s: wire %v, want %v", c.Name, wire, c.Wire)
		}
	}
	for _, c := range v.Decode {
		got, err := c.Wire.decode()
		if c.Error {
			if err == nil {
				t.Errorf("%s: decoded %x, want an error", c.Name, got)
			}
			continue
		}
		if err != nil || hex.EncodeToString(got) != c.Hex {
			t.Errorf("%s: %x, %v; want %s", c.Name, got, err, c.Hex)
		}
	}
}

// ----------------------------------------------------------- partition.json
func TestConformancePartition(t *testing.T) {
	var v struct {
		Reporter struct {
			Cases []struct {
				Key       string         `json:"key"`
				Enc       string         `json:"enc"`
				KeyHex    string         `json:"key_hex"`
				Murmur3   uint32         `json:"murmur3"`
				Partition map[string]int `json:"partition"`
			} `json:"cases"`
		} `json:"reporter"`
		Sharded struct {
			Cases []struct {
				Key     string         `json:"key"`
				Enc     string         `json:"enc"`
				KeyHex  string         `json:"key_hex"`
				Murmur3 uint32         `json:"murmur3"`
				Shard   map[string]int `json:"shard"`
			} `json:"cases"`
		} `json:"sharded"`
	}
	loadVectors(t, "partition.json", &v)
	keyOf := func(k, enc, h string) []byte {
		if h != "" {
			b, _ := hex.DecodeString(h)
			return b
		}
		b, err := DecodeKey(k, enc)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if len(v.Reporter.Cases) == 0 || len(v.Sharded.Cases) == 0 {
		t.Fatal("no partition vectors")
	}
	for _, c := range v.Reporter.Cases {
		k := keyOf(c.Key, c.Enc, c.KeyHex)
		if h := Murmur3_32(k, 0); h != c.Murmur3 {
			t.Errorf("murmur3(%q) = %d, want %d", k, h, c.Murmur3)
		}
		for n, want := range c.Partition {
			parts, _ := strconv.Atoi(n)
			if got := PartitionFor(k, parts); got != want {
				t.Errorf("partition(%q, %d) = %d, want %d", k, parts, got, want)
			}
		}
	}
	for _, c := range v.Sharded.Cases {
		k := keyOf(c.Key, c.Enc, c.KeyHex)
		if h := Murmur3_32(k, shardSeed); h != c.Murmur3 {
			t.Errorf("murmur3(%q, 0x5EED) = %d, want %d", k, h, c.Murmur3)
		}
		for n, want := range c.Shard {
			shards, _ := strconv.Atoi(n)
			if got := ShardOf(k, shards); got != want {
				t.Errorf("shard(%q, %d) = %d, want %d", k, shards, got, want)
			}
		}
	}
}

// -------------------------------------------------------- invalidation.json
func TestConformanceInvalidation(t *testing.T) {
	var v struct {
		Decode []struct {
			Name    string    `json:"name"`
			Payload string    `json:"payload"`
			Origin  string    `json:"origin"`
			Drops   []wireKey `json:"drops"`
			Error   bool      `json:"error"`
		} `json:"decode"`
		Encode []struct {
			Name   string          `json:"name"`
			Origin string          `json:"origin"`
			Keys   []string        `json:"keys_hex"`
			JSON   json.RawMessage `json:"json"`
		} `json:"encode"`
	}
	loadVectors(t, "invalidation.json", &v)
	for _, c := range v.Decode {
		origin, keys, err := DecodeInvalidation([]byte(c.Payload))
		if c.Error {
			if err == nil {
				t.Errorf("%s: accepted %q", c.Name, c.Payload)
			}
			continue
		}
		if err != nil || origin != c.Origin || len(keys) != len(c.Drops) {
			t.Errorf("%s: %q %v %v", c.Name, origin, keys, err)
			continue
		}
		for i, d := range c.Drops {
			if want := mustKey(t, d); string(keys[i]) != want.Bytes {
				t.Errorf("%s: drop %d = %q, want %q", c.Name, i, keys[i], want.Bytes)
			}
		}
	}
	for _, c := range v.Encode {
		keys := make([][]byte, len(c.Keys))
		for i, h := range c.Keys {
			keys[i], _ = hex.DecodeString(h)
		}
		assertSameJSON(t, c.Name, EncodeInvalidation(c.Origin, keys), c.JSON)
	}
}

func assertSameJSON(t *testing.T, name string, got []byte, want []byte) {
	t.Helper()
	var a, b any
	if err := json.Unmarshal(got, &a); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	_ = json.Unmarshal(want, &b)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("%s:\n got %s\nwant %s", name, got, want)
	}
}

// -------------------------------------------------------------- demand.json
func TestConformanceDemand(t *testing.T) {
	var v struct {
		Cases []struct {
			Name       string  `json:"name"`
			App        string  `json:"app"`
			Seq        int64   `json:"seq"`
			TS         float64 `json:"ts"`
			IntervalMs int64   `json:"interval_ms"`
			Reads      []struct {
				KeyHex   string `json:"key_hex"`
				DB       int    `json:"db"`
				N        uint64 `json:"n"`
				Instance string `json:"instance"`
			} `json:"reads"`
			Messages map[string]map[string]any `json:"messages"`
			Dropped  map[string]uint64         `json:"dropped"`
			Seqs     []int64                   `json:"seqs"`
		} `json:"cases"`
	}
	raw, _ := os.ReadFile(specPath(t, "demand.json"))
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	for _, c := range v.Cases {
		reads := make([]DemandRead, len(c.Reads))
		for i, r := range c.Reads {
			b, _ := hex.DecodeString(r.KeyHex)
			reads[i] = DemandRead{Key: Key{string(b), r.DB}, N: r.N, Instance: r.Instance}
		}
		reps := BuildDemandReports(c.App, c.Seq, c.TS, time.Duration(c.IntervalMs)*time.Millisecond, reads)
		if len(reps) != len(c.Messages) {
			t.Errorf("%s: %d messages, want %d", c.Name, len(reps), len(c.Messages))
			continue
		}
		var seqs []int64
		for _, rep := range reps {
			want, ok := c.Messages[rep.Instance]
			if !ok {
				t.Errorf("%s: unexpected message for %s", c.Name, rep.Instance)
				continue
			}
			var got map[string]any
			_ = json.Unmarshal(rep.Payload, &got)
			if got["seq"] != float64(rep.Seq) {
				t.Errorf("%s: seq %v vs %d", c.Name, got["seq"], rep.Seq)
			}
			seqs = append(seqs, rep.Seq)
			delete(got, "seq")
			gotEntries, wantEntries := entrySet(t, got["entries"]), entrySet(t, want["entries"])
			delete(got, "entries")
			w := map[string]any{}
			for k, val := range want {
				if k != "entries" && k != "seq" {
					w[k] = val
				}
			}
			if !reflect.DeepEqual(got, w) || !reflect.DeepEqual(gotEntries, wantEntries) {
				t.Errorf("%s: message for %s\n got %s\nwant %v", c.Name, rep.Instance, rep.Payload, want)
			}
			if rep.Dropped != c.Dropped[rep.Instance] {
				t.Errorf("%s: dropped %d, want %d", c.Name, rep.Dropped, c.Dropped[rep.Instance])
			}
		}
		sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
		want := append([]int64(nil), c.Seqs...)
		sort.Slice(want, func(i, j int) bool { return want[i] < want[j] })
		if len(want) > 0 && !reflect.DeepEqual(seqs, want) {
			t.Errorf("%s: seqs %v, want %v", c.Name, seqs, want)
		}
	}
}

func entrySet(t *testing.T, v any) map[Key]float64 {
	out := map[Key]float64{}
	list, _ := v.([]any)
	for _, e := range list {
		m := e.(map[string]any)
		enc, _ := m["enc"].(string)
		db, _ := m["db"].(float64)
		b, err := DecodeKey(m["key"].(string), enc)
		if err != nil {
			t.Fatal(err)
		}
		out[Key{string(b), int(db)}] = m["n"].(float64)
	}
	return out
}

// ------------------------------------------------------------- hotset.json
type manualClock struct{ ms int64 }

func (c *manualClock) Monotonic() float64 { return float64(c.ms) / 1000 }

func TestConformanceHotSet(t *testing.T) { runHotSetVectors(t, "hotset.json") }

// mapSnapshots is the runner's pretend Redis: the snapshot each instance keeps.
type mapSnapshots map[string][]byte

func (m mapSnapshots) live(context.Context, float64) ([]string, error) {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

func (m mapSnapshots) get(_ context.Context, instance string) ([]byte, bool, error) {
	raw, ok := m[instance]
	return raw, ok, nil
}

// runHotSetVectors feeds a file in the hotset.json format through the subscriber's own
// message handler (handle, as a live subscription calls it) and its bootstrap, with a
// map for Redis; the outcome is read from the subscriber's counters.
func runHotSetVectors(t *testing.T, file string) {
	var v struct {
		StartMs int64   `json:"start_ms"`
		NowS    float64 `json:"now_s"`
		Cases   []struct {
			Name  string            `json:"name"`
			Skip  map[string]string `json:"skip"`
			Steps []struct {
				Op        string          `json:"op"`
				Data      json.RawMessage `json:"data"`
				Raw       *string         `json:"raw"`
				PadTo     int             `json:"pad_to"`
				Ms        int64           `json:"ms"`
				Outcome   string          `json:"outcome"`
				Skipped   int             `json:"skipped"`
				Hot       *[]wireKey      `json:"hot"`
				BecameHot *[]wireKey      `json:"became_hot"`
				Cooled    *[]wireKey      `json:"cooled"`
			} `json:"steps"`
		} `json:"cases"`
	}
	loadVectors(t, file, &v)
	if len(v.Cases) == 0 {
		t.Fatalf("no vectors in %s", file)
	}
	ctx := context.Background()
	for _, c := range v.Cases {
		t.Run(c.Name, func(t *testing.T) {
			if why, ok := c.Skip["go"]; ok {
				t.Skip(why)
			}
			clock := &manualClock{ms: v.StartMs}
			var became, cooled []Key
			sub := NewSubscriber(SubscriberOptions{
				HotSet: HotSetOptions{Clock: clock,
					OnHot:  func(e HotEntry) { became = append(became, Key{string(e.Key), e.DB}) },
					OnCool: func(k Key) { cooled = append(cooled, k) }},
				Now: func() float64 { return v.NowS + float64(clock.ms-v.StartMs)/1000 },
			})
			store := mapSnapshots{}
			sub.snaps = store
			hs := sub.HotSet()
			for i, s := range c.Steps {
				became, cooled = nil, nil
				outcome := ""
				before := sub.Stats()
				switch s.Op {
				case "snapshot":
					var d struct {
						Instance string `json:"instance"`
					}
					_ = json.Unmarshal(s.Data, &d)
					store[d.Instance] = s.Data
				case "bootstrap":
					if err := sub.bootstrap(ctx, nil); err != nil {
						t.Fatal(err)
					}
				case "advance":
					clock.ms += s.Ms
					hs.Expire()
				case "message":
					payload := []byte(s.Data)
					if s.Raw != nil {
						payload = []byte(*s.Raw)
					}
					if pad := s.PadTo - len(payload); pad > 0 {
						payload = append(payload, bytes.Repeat([]byte(" "), pad)...)
					}
					if err := sub.handle(ctx, payload); err != nil {
						t.Fatal(err)
					}
					after := sub.Stats()
					switch {
					case after.BadMessages > before.BadMessages:
						outcome = "bad"
					case after.Suspect > before.Suspect:
						outcome = "suspect"
					case after.Gaps > before.Gaps:
						outcome = "resynced"
					case after.Applied > before.Applied:
						outcome = "applied"
					case after.Stale > before.Stale:
						outcome = "stale"
					case after.Refused > before.Refused:
						outcome = "refused"
					}
					if got := int(after.BadEntries - before.BadEntries); got != s.Skipped {
						t.Errorf("step %d: skipped %d entries, want %d", i, got, s.Skipped)
					}
				default:
					t.Fatalf("step %d: unknown op %q", i, s.Op)
				}
				if s.Outcome != "" && outcome != s.Outcome {
					t.Errorf("step %d (%s): outcome %q, want %q", i, s.Op, outcome, s.Outcome)
				}
				if s.Hot != nil {
					assertKeys(t, i, "hot", hs.Keys(), *s.Hot, true)
				}
				if s.BecameHot != nil {
					assertKeys(t, i, "became_hot", became, *s.BecameHot, false)
				}
				if s.Cooled != nil {
					assertKeys(t, i, "cooled", cooled, *s.Cooled, false)
				}
			}
		})
	}
}

// ---------------------------------------------------------------- auth.json
func TestConformanceAuth(t *testing.T) {
	raw, err := os.ReadFile(specPath(t, "auth.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Key  string `json:"key_utf8"`
		Sign []struct {
			Name, Body, Signed string
			Mac                string `json:"mac_hex"`
		} `json:"sign"`
		Reject []struct{ Name, Signed string } `json:"reject"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	auth, err := NewMessageAuth([]byte(v.Key))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Sign) == 0 || len(v.Reject) == 0 {
		t.Fatal("no auth vectors")
	}
	for _, c := range v.Sign {
		signed, err := auth.Sign([]byte(c.Body))
		if err != nil || string(signed) != c.Signed {
			t.Errorf("%s: sign = %s, %v", c.Name, signed, err)
		}
		body, ok := auth.Verify([]byte(c.Signed))
		if !ok || string(body) != c.Body {
			t.Errorf("%s: verify = %q, %v", c.Name, body, ok)
		}
	}
	for _, c := range v.Reject {
		if _, ok := auth.Verify([]byte(c.Signed)); ok {
			t.Errorf("%s: accepted", c.Name)
		}
	}
}

func assertKeys(t *testing.T, step int, what string, got []Key, want []wireKey, withDB bool) {
	t.Helper()
	if withDB {
		w := map[Key]bool{}
		for _, k := range want {
			w[mustKey(t, k)] = true
		}
		g := map[Key]bool{}
		for _, k := range got {
			g[k] = true
		}
		if !reflect.DeepEqual(g, w) || len(got) != len(g) {
			t.Errorf("step %d: %s = %v, want %v", step, what, got, want)
		}
		return
	}
	var g, w []string
	for _, k := range got {
		g = append(g, k.Bytes)
	}
	for _, k := range want {
		w = append(w, mustKey(t, k).Bytes)
	}
	sort.Strings(g)
	sort.Strings(w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("step %d: %s = %q, want %q", step, what, g, w)
	}
}
