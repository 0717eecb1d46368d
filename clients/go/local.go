package hotkeyd

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"golang.org/x/sync/singleflight"
)

// CacheStats are the counters of the local cache.
type CacheStats struct {
	Hits, StaleHits, Misses, Refreshes, Waits, Invalidations, Evictions, TooBig int64
}

const entryOverhead = 120 // bytes per entry: the struct, map slot and list element

// cacheKey names one cached reply: the command (g GET, h HGET, H HGETALL, c cached()),
// the Redis key and, for HGET, the field. A struct, so the read path allocates nothing.
type cacheKey struct {
	op    byte
	key   string
	field string
}

func (k cacheKey) String() string { return string(k.op) + "\x00" + k.field + "\x00" + k.key }

type localEntry struct {
	value   any
	rkey    string
	size    int
	expires float64
}

type flight struct {
	rk      string
	tainted bool
}

// localCache is a bounded LRU (entries and bytes) with single-flight refresh and logical
// expiry: one caller refreshes an expired entry while the others get the stale value for
// up to staleFor, or wait up to waitTimeout. An invalidation that arrives while a refresh
// is in flight taints it, so a slow read never undoes a newer write.
//
// golang-lru's simplelru is the LRU list (maintained, small, no goroutines); the byte
// bound and the flights are ours, under one mutex.
type localCache struct {
	mu          sync.RWMutex
	lru         *simplelru.LRU[cacheKey, *localEntry]
	byKey       map[string]map[cacheKey]struct{} // redis key bytes -> cached replies
	flights     map[cacheKey]*flight
	sf          singleflight.Group
	bytes       int
	maxBytes    int
	staleFor    float64
	waitTimeout time.Duration
	clock       Clock
	stats       CacheStats
}

func newLocalCache(maxEntries, maxBytes int, staleFor, waitTimeout time.Duration, clock Clock) *localCache {
	c := &localCache{
		byKey: map[string]map[cacheKey]struct{}{}, flights: map[cacheKey]*flight{},
		maxBytes: maxBytes, staleFor: staleFor.Seconds(), waitTimeout: waitTimeout, clock: clock,
	}
	c.lru, _ = simplelru.NewLRU[cacheKey, *localEntry](maxEntries, c.onEvict)
	return c
}

func (c *localCache) onEvict(ck cacheKey, e *localEntry) {
	c.bytes -= e.size
	if set := c.byKey[e.rkey]; set != nil {
		delete(set, ck)
		if len(set) == 0 {
			delete(c.byKey, e.rkey)
		}
	}
}

// load returns the cached value of ck (for Redis key rk), fetching it single-flight;
// local is true when the value came from memory (a read Redis did not see).
//
// The hit path takes a read lock and Peeks (no recency update): entries live for one TTL
// and are re-inserted on refresh, so insertion order is close to use order for hot keys.
func (c *localCache) load(ck cacheKey, now, ttl float64, fetch func() (any, int, error)) (v any, local bool, err error) {
	if v, ok := c.peek(ck, now); ok {
		return v, true, nil
	}
	return c.fill(ck, ttl, fetch)
}

// peek is the hit path: a fresh copy, or a stale one while another caller refreshes it.
// It allocates nothing; callers build the fetch closure only when it misses.
func (c *localCache) peek(ck cacheKey, now float64) (any, bool) {
	c.mu.RLock()
	e, ok := c.lru.Peek(ck)
	if ok && e.expires > now {
		c.mu.RUnlock()
		atomic.AddInt64(&c.stats.Hits, 1)
		return e.value, true
	}
	_, inflight := c.flights[ck]
	c.mu.RUnlock()
	if ok && inflight && now < e.expires+c.staleFor {
		atomic.AddInt64(&c.stats.StaleHits, 1)
		return e.value, true
	}
	return nil, false
}

// fill loads ck single-flight; local is true for callers that shared another's load.
func (c *localCache) fill(ck cacheKey, ttl float64, fetch func() (any, int, error)) (v any, local bool, err error) {
	atomic.AddInt64(&c.stats.Misses, 1)
	rk := ck.key
	ch := c.sf.DoChan(ck.String(), func() (any, error) {
		c.mu.Lock()
		fl := &flight{rk: rk}
		c.flights[ck] = fl
		c.mu.Unlock()
		atomic.AddInt64(&c.stats.Refreshes, 1)
		v, size, err := fetch()
		c.mu.Lock()
		delete(c.flights, ck)
		if err == nil && !fl.tainted {
			c.store(ck, rk, v, size, c.clock.Monotonic()+ttl)
		}
		c.mu.Unlock()
		return v, err
	})
	timer := time.NewTimer(c.waitTimeout)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.Val, r.Shared, r.Err
	case <-timer.C:
		atomic.AddInt64(&c.stats.Waits, 1)
		v, _, err := fetch() // the refresh is slow: read for ourselves, do not cache
		return v, false, err
	}
}

func (c *localCache) store(ck cacheKey, rk string, v any, size int, expires float64) {
	size += entryOverhead + len(ck.key) + len(ck.field)
	if size > c.maxBytes/8 {
		atomic.AddInt64(&c.stats.TooBig, 1)
		return
	}
	if old, ok := c.lru.Peek(ck); ok {
		c.bytes -= old.size
	}
	c.lru.Add(ck, &localEntry{value: v, rkey: rk, size: size, expires: expires})
	c.bytes += size
	set := c.byKey[rk]
	if set == nil {
		set = map[cacheKey]struct{}{}
		c.byKey[rk] = set
	}
	set[ck] = struct{}{}
	for c.bytes > c.maxBytes {
		if _, _, ok := c.lru.RemoveOldest(); !ok {
			break
		}
		atomic.AddInt64(&c.stats.Evictions, 1)
	}
}

// invalidate drops every cached value of Redis key rk and taints refreshes in flight.
// A cache serves one logical database, so the key bytes identify it.
func (c *localCache) invalidate(rk string) {
	c.mu.Lock()
	for ck := range c.byKey[rk] {
		c.lru.Remove(ck)
	}
	for _, fl := range c.flights { // few at a time; a first load has no entry yet
		if fl.rk == rk {
			fl.tainted = true
		}
	}
	c.mu.Unlock()
	atomic.AddInt64(&c.stats.Invalidations, 1)
}

func (c *localCache) clear() {
	c.mu.Lock()
	c.lru.Purge()
	c.bytes = 0
	c.byKey = map[string]map[cacheKey]struct{}{}
	for _, fl := range c.flights {
		fl.tainted = true
	}
	c.mu.Unlock()
}

func (c *localCache) Stats() CacheStats {
	s := &c.stats
	return CacheStats{
		Hits: atomic.LoadInt64(&s.Hits), StaleHits: atomic.LoadInt64(&s.StaleHits),
		Misses: atomic.LoadInt64(&s.Misses), Refreshes: atomic.LoadInt64(&s.Refreshes),
		Waits: atomic.LoadInt64(&s.Waits), Invalidations: atomic.LoadInt64(&s.Invalidations),
		Evictions: atomic.LoadInt64(&s.Evictions), TooBig: atomic.LoadInt64(&s.TooBig),
	}
}
