package hotkeyd

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// spec/vectors/watch.json through the objects a HotCache feeds every heartbeat and
// invalidation through (watchLeases, invalidationIntake).

type watchVectors struct {
	LeaseMs int64   `json:"lease_ms"`
	NowS    float64 `json:"now_s"`
	Decode  []struct {
		Name      string         `json:"name"`
		Payload   string         `json:"payload"`
		OK        bool           `json:"ok"`
		Heartbeat map[string]any `json:"heartbeat"`
	} `json:"decode"`
	Leases []struct {
		Name  string           `json:"name"`
		Steps []map[string]any `json:"steps"`
	} `json:"leases"`
	Intake []struct {
		Name       string         `json:"name"`
		Auth       bool           `json:"auth"`
		Payload    string         `json:"payload"`
		Gen        map[string]int `json:"gen"`
		Outcome    string         `json:"outcome"`
		Drops      []string       `json:"drops"`
		DropsCount *int           `json:"drops_count"`
	} `json:"intake"`
	Ratelimit []struct {
		Name      string  `json:"name"`
		Events    [][]any `json:"events"`
		AppliedMs []int64 `json:"applied_ms"`
	} `json:"ratelimit"`
}

func loadWatchVectors(t *testing.T) watchVectors {
	var v watchVectors
	loadVectors(t, "watch.json", &v)
	return v
}

func TestWatchVectorsDecode(t *testing.T) {
	v := loadWatchVectors(t)
	if v.LeaseMs != watchLease.Milliseconds() {
		t.Fatalf("lease %d ms, limits say %s", v.LeaseMs, watchLease)
	}
	for _, c := range v.Decode {
		hb, err := DecodeHeartbeat([]byte(c.Payload), v.NowS)
		if !c.OK {
			if err == nil {
				t.Errorf("%s: accepted", c.Name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		w := c.Heartbeat
		got := fmt.Sprintf("%v|%v|%v|%v|%v", hb.Instance, hb.Node, hb.Epoch, hb.Up, hb.Armed)
		want := fmt.Sprintf("%v|%v|%v|%v|%v", w["instance"], w["node"], w["epoch"], w["up"], w["armed"])
		if got != want {
			t.Errorf("%s: got %s want %s", c.Name, got, want)
		}
		if fmt.Sprint(slotsAny(hb.Slots)) != fmt.Sprint(w["slots"]) {
			t.Errorf("%s: slots %v want %v", c.Name, hb.Slots, w["slots"])
		}
	}
}

func slotsAny(s [][2]int) any {
	if s == nil {
		return nil
	}
	out := []any{}
	for _, r := range s {
		out = append(out, []any{json.Number(fmt.Sprint(r[0])), json.Number(fmt.Sprint(r[1]))})
	}
	return out
}

func hbPayload(t *testing.T, now float64, d map[string]any) []byte {
	body := map[string]any{"v": 1, "ts": now}
	for k, x := range d {
		body[k] = x
	}
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWatchVectorsLeases(t *testing.T) {
	v := loadWatchVectors(t)
	for _, c := range v.Leases {
		w := newWatchLeases()
		var g *guard
		for i, st := range c.Steps {
			now := fnum(st["at_ms"]) / 1000
			switch {
			case st["heartbeat"] != nil:
				hb, err := DecodeHeartbeat(hbPayload(t, v.NowS, st["heartbeat"].(map[string]any)), v.NowS)
				if err != nil {
					t.Fatalf("%s step %d: %v", c.Name, i, err)
				}
				if got := w.heard(hb, now); got != st["epoch_changed"].(bool) {
					t.Errorf("%s step %d: epoch_changed %v", c.Name, i, got)
				}
			case st["guard"] != nil:
				gs := st["guard"].(map[string]any)
				var hot []instSeq
				for _, h := range gs["hot"].([]any) {
					p := h.([]any)
					hot = append(hot, instSeq{p[0].(string), int64(fnum(p[1]))})
				}
				g = w.guard(int(fnum(gs["slot"])), hot, now)
				var want *guard
				if e, ok := st["expect"].([]any); ok {
					want = &guard{instance: e[0].(string)}
					for _, n := range e[1].([]any) {
						p := n.([]any)
						want.nodes = append(want.nodes, nodeEpoch{p[0].(string), int64(fnum(p[1]))})
					}
				}
				if !g.equal(want) {
					t.Errorf("%s step %d: guard %+v want %+v", c.Name, i, g, want)
				}
			case st["serve"] != nil:
				slot := int(fnum(st["serve"].(map[string]any)["slot"]))
				if got := w.serves(g, slot, now); got != st["expect"].(bool) {
					t.Errorf("%s step %d: serves %v", c.Name, i, got)
				}
			case st["forget"] != nil:
				w.forget()
			}
		}
	}
}

func genInvalidation(gen map[string]int) []byte {
	if n, ok := gen["bytes"]; ok {
		head, tail := `{"v":1,"origin":"`, `","keys":[{"key":"x"}]}`
		return []byte(head + strings.Repeat("o", n-len(head)-len(tail)) + tail)
	}
	keys := make([]string, gen["keys"])
	for i := range keys {
		keys[i] = fmt.Sprintf(`{"key":"k%d"}`, i)
	}
	return []byte(`{"v":1,"origin":"o","keys":[` + strings.Join(keys, ",") + `]}`)
}

func TestWatchVectorsIntake(t *testing.T) {
	v := loadWatchVectors(t)
	var av struct {
		Key string `json:"key_utf8"`
	}
	loadVectors(t, "auth.json", &av)
	for _, c := range v.Intake {
		var auth *MessageAuth
		if c.Auth {
			a, err := NewMessageAuth([]byte(av.Key))
			if err != nil {
				t.Fatal(err)
			}
			auth = a
		}
		in := newInvalidationIntake(auth)
		payload := []byte(c.Payload)
		if c.Gen != nil {
			payload = genInvalidation(c.Gen)
		}
		keys, ok := in.receive(payload, 0)
		s := in.stats
		counts := map[string]int64{"oversized": s.Oversized, "unsigned": s.Unsigned, "bad": s.Bad}
		if c.Outcome == "applied" {
			if !ok || s.Oversized+s.Unsigned+s.Bad != 0 {
				t.Errorf("%s: dropped %+v", c.Name, s)
				continue
			}
			if c.DropsCount != nil {
				if len(keys) != *c.DropsCount {
					t.Errorf("%s: %d drops", c.Name, len(keys))
				}
				continue
			}
			got := []string{}
			for _, k := range keys {
				got = append(got, string(k))
			}
			if !reflect.DeepEqual(got, append([]string{}, c.Drops...)) {
				t.Errorf("%s: drops %v want %v", c.Name, got, c.Drops)
			}
		} else if ok || counts[c.Outcome] != 1 {
			t.Errorf("%s: ok=%v stats %+v, want %s", c.Name, ok, s, c.Outcome)
		}
	}
}

func TestWatchVectorsRatelimit(t *testing.T) {
	v := loadWatchVectors(t)
	inval := []byte(`{"v":1,"origin":"o","keys":[{"key":"k"}]}`)
	for _, c := range v.Ratelimit {
		in := newInvalidationIntake(nil)
		applied := []int64{}
		for _, e := range c.Events {
			ms := int64(fnum(e[1]))
			now := float64(ms) / 1000
			if e[0] == "inval" {
				if keys, _ := in.receive(inval, now); len(keys) == 1 {
					applied = append(applied, ms)
				}
			} else if in.due("k", now) {
				applied = append(applied, ms)
			}
		}
		if !reflect.DeepEqual(applied, append([]int64{}, c.AppliedMs...)) {
			t.Errorf("%s: applied %v want %v", c.Name, applied, c.AppliedMs)
		}
	}
}

func fnum(x any) float64 {
	switch n := x.(type) {
	case json.Number:
		f, _ := n.Float64()
		return f
	case float64:
		return n
	}
	panic(fmt.Sprintf("not a number: %#v", x))
}
