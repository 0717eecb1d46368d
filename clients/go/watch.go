package hotkeyd

// The app side of the daemon's watch (docs/consistency.md): heartbeats, strict or
// available serving, and the intake every invalidation goes through. The decisions are
// pinned by spec/vectors/watch.json (watch_test.go runs it), the same for every SDK.

import (
	"encoding/json"
	"math"
	"sort"
	"sync"
)

// Consistency is what a HotCache serves while the daemon's watch cannot vouch for a copy.
type Consistency string

const (
	// Available (the default) serves a copy until its TTL, as without a watch, and counts
	// the reads the watch did not vouch for in WatchStats.Lapsed.
	Available Consistency = "available"
	// Strict serves a copy only while the latest heartbeat of its node is under 300 ms
	// old, up, carries the epoch the copy was fetched under, and says the key is armed;
	// otherwise the read goes to Redis and is not cached.
	Strict Consistency = "strict"
)

// Heartbeat is one message of <prefix>:watch (spec/schema/watch-heartbeat-v1.json).
type Heartbeat struct {
	Instance, Node string
	Epoch, Armed   int64
	Up             bool
	TS             float64
	Slots          [][2]int // nil: a plain node, covering every key
}

func (h *Heartbeat) covers(slot int) bool {
	if h.Slots == nil {
		return true
	}
	for _, r := range h.Slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

func hbInt(obj map[string]any, name string, def *int64) (int64, error) {
	raw, ok := obj[name]
	if !ok && def != nil {
		return *def, nil
	}
	n, ok := raw.(json.Number)
	if !ok {
		return 0, wireErr("heartbeat %s must be an integer", name)
	}
	v, err := n.Int64()
	if err != nil || v < 0 || v > MaxSeq {
		return 0, wireErr("heartbeat %s must be an integer in [0, seq_max]", name)
	}
	return v, nil
}

func hbName(obj map[string]any, name string) (string, error) {
	s, ok := obj[name].(string)
	if !ok || s == "" || len([]rune(s)) > maxName {
		return "", wireErr("heartbeat %s must be a string of 1..%d characters", name, maxName)
	}
	return s, nil
}

// DecodeHeartbeat validates one heartbeat (already verified when auth is on); nowS is
// the receiver's unix time, against which a ts far in the future is rejected.
func DecodeHeartbeat(data []byte, nowS float64) (Heartbeat, error) {
	var hb Heartbeat
	obj, err := decodeStrict(data)
	if err != nil || obj == nil {
		return hb, wireErr("heartbeat rejected: %v", err)
	}
	if v, ok := obj["v"].(json.Number); !ok || v.String() != "1" {
		return hb, wireErr("heartbeat is not a v1 object")
	}
	tsn, ok := obj["ts"].(json.Number)
	ts, terr := tsn.Float64()
	if !ok || terr != nil || math.IsNaN(ts) || math.IsInf(ts, 0) || ts < 0 {
		return hb, wireErr("heartbeat ts must be a finite number >= 0")
	}
	if ts > nowS+maxClockSkew.Seconds() {
		return hb, wireErr("heartbeat ts is too far ahead of this clock")
	}
	up, ok := obj["up"].(bool)
	if !ok {
		return hb, wireErr("heartbeat up must be a boolean")
	}
	if raw, present := obj["slots"]; present {
		list, ok := raw.([]any)
		if !ok {
			return hb, wireErr("heartbeat slots must be a list")
		}
		hb.Slots = make([][2]int, 0, len(list))
		for _, r := range list {
			pair, ok := r.([]any)
			if !ok || len(pair) != 2 {
				return hb, wireErr("bad slot range")
			}
			var lohi [2]int
			for i, x := range pair {
				n, ok := x.(json.Number)
				v, err := n.Int64()
				if !ok || err != nil || v < 0 || v > 16383 {
					return hb, wireErr("bad slot range")
				}
				lohi[i] = int(v)
			}
			if lohi[0] > lohi[1] {
				return hb, wireErr("bad slot range")
			}
			hb.Slots = append(hb.Slots, lohi)
		}
	}
	zero := int64(0)
	if hb.Instance, err = hbName(obj, "instance"); err != nil {
		return hb, err
	}
	if hb.Node, err = hbName(obj, "node"); err != nil {
		return hb, err
	}
	if hb.Epoch, err = hbInt(obj, "epoch", nil); err != nil {
		return hb, err
	}
	if hb.Armed, err = hbInt(obj, "armed", &zero); err != nil {
		return hb, err
	}
	hb.Up, hb.TS = up, ts
	return hb, nil
}

// WatchStats count what the watch did for one cache.
type WatchStats struct {
	Heartbeats, BadHeartbeats int64
	EpochChanges              int64 // a node's watch reconnected: every copy dropped
	Lapsed                    int64 // reads of a hot key the watch did not vouch for
	StrictMisses              int64 // of those, reads strict mode sent to Redis uncached
	UnwatchedCopies           int64 // fetches no watch covered
}

type nodeEpoch struct {
	Node  string
	Epoch int64
}

// guard is what a copy was fetched under.
type guard struct {
	instance string
	nodes    []nodeEpoch
}

func (g *guard) equal(o *guard) bool {
	if g == nil || o == nil {
		return g == o
	}
	if g.instance != o.instance || len(g.nodes) != len(o.nodes) {
		return false
	}
	for i := range g.nodes {
		if g.nodes[i] != o.nodes[i] {
			return false
		}
	}
	return true
}

type heard struct {
	hb Heartbeat
	at float64
}

type instSeq struct {
	instance string
	seq      int64
}

// watchLeases: the latest heartbeat per (instance, node).
type watchLeases struct {
	mu        sync.RWMutex
	lease     float64
	latest    map[[2]string]heard
	clustered bool
	stats     WatchStats
}

func newWatchLeases() *watchLeases {
	return &watchLeases{lease: watchLease.Seconds(), latest: map[[2]string]heard{}}
}

const watchEps = 1e-9

// heard records a heartbeat; true when the node's epoch changed (drop every copy).
func (w *watchLeases) heard(hb Heartbeat, at float64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.Heartbeats++
	if hb.Slots != nil {
		w.clustered = true
	}
	k := [2]string{hb.Instance, hb.Node}
	prev, ok := w.latest[k]
	w.latest[k] = heard{hb, at}
	if ok && prev.hb.Epoch != hb.Epoch {
		w.stats.EpochChanges++
		return true
	}
	return false
}

func (w *watchLeases) forget() {
	w.mu.Lock()
	w.latest = map[[2]string]heard{}
	w.mu.Unlock()
}

func (w *watchLeases) seen() bool {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return len(w.latest) > 0
}

// guard of a read of a key in slot beginning at now; hot: (instance, seq that made the
// key hot there). Nil when no instance's watch vouches for the key.
func (w *watchLeases) guard(slot int, hot []instSeq, now float64) *guard {
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, h := range hot {
		var nodes []nodeEpoch
		ok := true
		for k, e := range w.latest {
			if k[0] != h.instance || !e.hb.covers(slot) {
				continue
			}
			if !e.hb.Up || now-e.at >= w.lease-watchEps || e.hb.Armed < h.seq {
				ok = false
				break
			}
			nodes = append(nodes, nodeEpoch{k[1], e.hb.Epoch})
		}
		if ok && len(nodes) > 0 {
			sort.Slice(nodes, func(i, j int) bool { return nodes[i].Node < nodes[j].Node })
			return &guard{h.instance, nodes}
		}
	}
	return nil
}

// serves: every node of g is fresh, up, still covers slot and carries g's epoch.
func (w *watchLeases) serves(g *guard, slot int, now float64) bool {
	if g == nil {
		return false
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	for _, n := range g.nodes {
		e, ok := w.latest[[2]string{g.instance, n.Node}]
		if !ok || !e.hb.Up || e.hb.Epoch != n.Epoch || now-e.at >= w.lease-watchEps || !e.hb.covers(slot) {
			return false
		}
	}
	return true
}

// IntakeStats count the invalidations a cache received.
type IntakeStats struct {
	Applied, Deferred, Oversized, Unsigned, Bad int64
}

// invalidationIntake: size cap, signature, per-key interval; early drops are deferred
// to the key's next read (or next invalidation) after the interval, never lost.
type invalidationIntake struct {
	mu       sync.Mutex
	auth     *MessageAuth
	interval float64
	maxBytes int
	maxKeys  int
	last     map[string]float64
	pending  map[string]float64
	stats    IntakeStats
}

func newInvalidationIntake(auth *MessageAuth) *invalidationIntake {
	return &invalidationIntake{
		auth: auth, interval: invalidationKeyInterval.Seconds(), maxBytes: maxInvalidationBytes,
		maxKeys: maxInvalidationKeys, last: map[string]float64{}, pending: map[string]float64{},
	}
}

// receive returns the keys whose copies drop now; ok false when the message was dropped.
func (in *invalidationIntake) receive(payload []byte, now float64) ([][]byte, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(payload) > in.maxBytes {
		in.stats.Oversized++
		return nil, false
	}
	if in.auth != nil {
		body, ok := in.auth.Verify(payload)
		if !ok {
			in.stats.Unsigned++
			return nil, false
		}
		payload = body
	}
	_, keys, err := DecodeInvalidation(payload)
	if err != nil {
		in.stats.Bad++
		return nil, false
	}
	if len(keys) > in.maxKeys {
		in.stats.Oversized++
		return nil, false
	}
	out := keys[:0]
	for _, k := range keys {
		if in.arrive(string(k), now) {
			out = append(out, k)
		}
	}
	return out, true
}

func (in *invalidationIntake) arrive(k string, now float64) bool {
	if at, ok := in.pending[k]; ok {
		if at > now+watchEps {
			return false // coalesced into the deferred drop
		}
		delete(in.pending, k)
		in.applied(k, now)
		return true
	}
	last, ok := in.last[k]
	if !ok || now-last >= in.interval-watchEps {
		in.applied(k, now)
		return true
	}
	in.pending[k] = last + in.interval
	in.stats.Deferred++
	return false
}

// due: at a read of k, true when its deferred drop applies now.
func (in *invalidationIntake) due(k string, now float64) bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	at, ok := in.pending[k]
	if !ok || at > now+watchEps {
		return false
	}
	delete(in.pending, k)
	in.applied(k, now)
	return true
}

func (in *invalidationIntake) hasPending() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.pending) > 0
}

func (in *invalidationIntake) applied(k string, at float64) {
	in.stats.Applied++
	if len(in.last) >= 100_000 {
		for key, t := range in.last {
			if t <= at-in.interval {
				delete(in.last, key)
			}
		}
	}
	in.last[k] = at
}
