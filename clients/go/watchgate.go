package hotkeyd

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

func wallNow() float64 { return float64(time.Now().UnixNano()) / 1e9 }

// watchGate is a cache's consistency mode: heartbeats in, serve decisions out (the Go
// twin of hotkeyd.client.consistency.WatchGate; semantics in docs/consistency.md).
type watchGate struct {
	strict  bool
	hot     *HotSet
	clock   Clock
	auth    *MessageAuth
	leases  *watchLeases
	intake  *invalidationIntake
	drop    func(string)
	dropAll func()

	mu     sync.Mutex
	guards map[cacheKey]*guard

	lapsed, strictMisses, unwatched, badHeartbeats atomic.Int64
}

func newWatchGate(mode Consistency, hot *HotSet, clock Clock, auth *MessageAuth, drop func(string), dropAll func()) (*watchGate, error) {
	switch mode {
	case "", Available, Strict:
	default:
		return nil, fmt.Errorf("hotkeyd: Consistency must be Available or Strict, got %q", mode)
	}
	return &watchGate{
		strict: mode == Strict, hot: hot, clock: clock, auth: auth,
		leases: newWatchLeases(), intake: newInvalidationIntake(auth),
		drop: drop, dropAll: dropAll, guards: map[cacheKey]*guard{},
	}, nil
}

func (g *watchGate) onInvalidation(payload []byte) bool {
	keys, ok := g.intake.receive(payload, g.clock.Monotonic())
	for _, k := range keys {
		g.drop(string(k))
	}
	return ok
}

func (g *watchGate) onHeartbeat(payload []byte) {
	if g.auth != nil {
		body, ok := g.auth.Verify(payload)
		if !ok {
			g.badHeartbeats.Add(1)
			return
		}
		payload = body
	}
	hb, err := DecodeHeartbeat(payload, wallNow())
	if err != nil {
		g.badHeartbeats.Add(1)
		return
	}
	if g.leases.heard(hb, g.clock.Monotonic()) {
		g.mu.Lock()
		g.guards = map[cacheKey]*guard{}
		g.mu.Unlock()
		g.dropAll() // the node's watch reconnected: a write in the gap may be unseen
	}
}

func (g *watchGate) reset() {
	g.leases.forget()
	g.mu.Lock()
	g.guards = map[cacheKey]*guard{}
	g.mu.Unlock()
}

func (g *watchGate) slot(key string) int {
	g.leases.mu.RLock()
	c := g.leases.clustered
	g.leases.mu.RUnlock()
	if !c {
		return 0
	}
	return KeySlot(key)
}

// admit: may the local copy under ck (if any) be served now?
// settle: at any read of key, apply its deferred invalidation if its turn came.
func (g *watchGate) settle(key string, now float64) {
	if g.intake.hasPending() && g.intake.due(key, now) {
		g.drop(key)
	}
}

func (g *watchGate) admit(ck cacheKey, now float64) bool {
	g.settle(ck.key, now)
	if !g.strict && !g.leases.seen() {
		return true
	}
	g.mu.Lock()
	gd := g.guards[ck]
	g.mu.Unlock()
	if g.leases.serves(gd, g.slot(ck.key), now) {
		return true
	}
	g.lapsed.Add(1)
	return !g.strict
}

// beforeFetch records the guard of a fetch beginning now; false: read Redis, do not cache.
func (g *watchGate) beforeFetch(ck cacheKey, db int, now float64) bool {
	if !g.strict && !g.leases.seen() {
		return true
	}
	gd := g.leases.guard(g.slot(ck.key), g.hot.hotSince(Key{ck.key, db}, now), now)
	g.mu.Lock()
	if gd == nil {
		delete(g.guards, ck)
		g.mu.Unlock()
		g.unwatched.Add(1)
		if g.strict {
			g.strictMisses.Add(1)
			return false
		}
		return true
	}
	changed := !gd.equal(g.guards[ck])
	if changed {
		if len(g.guards) >= 100_000 {
			g.guards = map[cacheKey]*guard{}
		}
		g.guards[ck] = gd
	}
	g.mu.Unlock()
	if changed && g.strict {
		g.drop(ck.key) // a copy (or a fetch in flight) under an older guard must not stay
	}
	return true
}

func (g *watchGate) stats() WatchStats {
	g.leases.mu.RLock()
	s := g.leases.stats
	g.leases.mu.RUnlock()
	s.BadHeartbeats += g.badHeartbeats.Load()
	s.Lapsed, s.StrictMisses, s.UnwatchedCopies = g.lapsed.Load(), g.strictMisses.Load(), g.unwatched.Load()
	return s
}
