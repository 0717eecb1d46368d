package hotkeyd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// publishHot plays the daemon's part on the wire: a snapshot plus a message, exactly as
// docs/wire-format.md specifies (the cross-language end-to-end test uses the real daemon).
func publishHot(t *testing.T, c *redis.Client, ns Namespace, inst string, seq int64, key string, ttlMs int) {
	t.Helper()
	ctx := context.Background()
	msg := map[string]any{"v": 1, "instance": inst, "seq": seq, "ts": float64(time.Now().UnixNano()) / 1e9,
		"full": false, "final": false, "cool": []any{},
		"hot": []any{map[string]any{"key": key, "rate": 5000.0, "rule": "default", "ttl_ms": ttlMs, "since": 0}}}
	raw, _ := json.Marshal(msg)
	if err := c.Publish(ctx, ns.EventsChannel(), raw).Err(); err != nil {
		t.Fatal(err)
	}
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func newCache(t *testing.T, srv *redisServer, o CacheOptions) *HotCache {
	t.Helper()
	c := NewHotCache(srv.Client(t), o)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestHotKeyServedLocallyAndReported(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "t1"}
	admin.Set(ctx, "product:1", "v1", 0)
	cache := newCache(t, srv, CacheOptions{Namespace: ns, DemandInterval: 50 * time.Millisecond})
	demand := admin.Subscribe(ctx, ns.DemandChannel("daemon-a"))
	defer demand.Close()
	if _, err := demand.Receive(ctx); err != nil {
		t.Fatal(err)
	}

	before := commandCalls(t, admin, "get")
	for i := 0; i < 100; i++ { // cold: every read reaches Redis
		if v, err := cache.Get(ctx, "product:1"); err != nil || v != "v1" {
			t.Fatalf("cold get = %q, %v", v, err)
		}
	}
	if got := commandCalls(t, admin, "get") - before; got != 100 {
		t.Fatalf("cold reads reaching Redis = %d, want 100", got)
	}

	publishHot(t, admin, ns, "daemon-a", 1, "product:1", 5000)
	waitFor(t, "the key to turn hot", 5*time.Second, func() bool {
		_, ok := cache.HotSet().Get(Key{"product:1", 0})
		return ok
	})
	before = commandCalls(t, admin, "get")
	for i := 0; i < 1000; i++ {
		if v, err := cache.Get(ctx, "product:1"); err != nil || v != "v1" {
			t.Fatalf("hot get = %q, %v", v, err)
		}
	}
	if got := commandCalls(t, admin, "get") - before; got > 1 {
		t.Fatalf("hot reads reaching Redis = %d, want at most 1 (the load)", got)
	}

	// The daemon hears about the reads it no longer sees.
	total := uint64(0)
	deadline := time.Now().Add(5 * time.Second)
	for total < 999 && time.Now().Before(deadline) {
		m, err := demand.ReceiveTimeout(ctx, time.Second)
		if err != nil {
			continue
		}
		var rep struct {
			V       int    `json:"v"`
			Type    string `json:"type"`
			App     string `json:"app"`
			Entries []struct {
				Key string `json:"key"`
				N   uint64 `json:"n"`
			} `json:"entries"`
		}
		if err := json.Unmarshal([]byte(m.(*redis.Message).Payload), &rep); err != nil {
			t.Fatal(err)
		}
		if rep.V != 1 || rep.Type != "demand" || rep.App != cache.Origin() {
			t.Fatalf("bad report %+v", rep)
		}
		for _, e := range rep.Entries {
			if e.Key != "product:1" {
				t.Fatalf("report names %q", e.Key)
			}
			total += e.N
		}
	}
	if total < 999 || total > 1000 {
		t.Fatalf("reported %d locally served reads, want 999..1000", total)
	}
}

func TestWriteInvalidatesOtherCaches(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "t2"}
	admin.Set(ctx, "k", "old", 0)
	a := newCache(t, srv, CacheOptions{Namespace: ns})
	b := newCache(t, srv, CacheOptions{Namespace: ns})
	publishHot(t, admin, ns, "d", 1, "k", 60000)
	for _, c := range []*HotCache{a, b} {
		c := c
		waitFor(t, "hot", 5*time.Second, func() bool { _, ok := c.HotSet().Get(Key{"k", 0}); return ok })
		if v, _ := c.Get(ctx, "k"); v != "old" {
			t.Fatalf("got %q", v)
		}
	}
	start := time.Now()
	if err := a.Set(ctx, "k", "new", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "b to see the write", 2*time.Second, func() bool { v, _ := b.Get(ctx, "k"); return v == "new" })
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Logf("invalidation took %v (over 100 ms on a loaded machine)", d)
	}
	if v, _ := a.Get(ctx, "k"); v != "new" {
		t.Fatalf("writer serves %q after its own write", v)
	}
}

func TestSingleFlight(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "t3"}
	admin.Set(ctx, "sf", "v", 0)
	c := newCache(t, srv, CacheOptions{Namespace: ns})
	publishHot(t, admin, ns, "d", 1, "sf", 60000)
	waitFor(t, "hot", 5*time.Second, func() bool { _, ok := c.HotSet().Get(Key{"sf", 0}); return ok })
	before := commandCalls(t, admin, "get")
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if v, err := c.Get(ctx, "sf"); err != nil || v != "v" {
				t.Errorf("got %q %v", v, err)
			}
		}()
	}
	wg.Wait()
	if got := commandCalls(t, admin, "get") - before; got != 1 {
		t.Fatalf("100 concurrent readers caused %d GETs, want 1", got)
	}
}

func TestMissingKeyAndHashes(t *testing.T) {
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "t4"}
	admin.HSet(ctx, "h", "a", "1", "b", "2")
	c := newCache(t, srv, CacheOptions{Namespace: ns})
	publishHot(t, admin, ns, "d", 1, "h", 60000)
	publishHot(t, admin, ns, "d", 2, "missing", 60000)
	waitFor(t, "hot", 5*time.Second, func() bool { return c.HotSet().Len() == 2 })
	for i := 0; i < 3; i++ {
		if _, err := c.Get(ctx, "missing"); !errors.Is(err, redis.Nil) {
			t.Fatalf("missing key: err = %v, want redis.Nil", err)
		}
		if v, err := c.HGet(ctx, "h", "b"); err != nil || v != "2" {
			t.Fatalf("hget = %q %v", v, err)
		}
		m, err := c.HGetAll(ctx, "h")
		if err != nil || len(m) != 2 || m["a"] != "1" {
			t.Fatalf("hgetall = %v %v", m, err)
		}
		m["a"] = "mutated" // the caller's copy, not the cache's
	}
	vals, err := c.MGet(ctx, "h", "missing", "nope")
	if err != nil || len(vals) != 3 || vals[1] != nil || vals[2] != nil {
		t.Fatalf("mget = %v %v", vals, err)
	}
	n := 0
	load := func(context.Context) (string, error) { n++; return fmt.Sprint("row", n), nil }
	v1, _ := Cached(ctx, c, "h", load)
	v2, _ := Cached(ctx, c, "h", load)
	if v1 != "row1" || v2 != "row1" || n != 1 {
		t.Fatalf("cached loader ran %d times (%s, %s)", n, v1, v2)
	}
	v3, _ := Cached(ctx, c, "cold-key", load)
	if v3 != "row2" {
		t.Fatalf("a cold key must not be cached: %s", v3)
	}
}

func TestSubscriberReconnectsAfterRedisRestart(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "t5"}
	c := newCache(t, srv, CacheOptions{Namespace: ns})
	old := srv.Client(t)
	old.Set(ctx, "k", "old", 0)
	publishHot(t, old, ns, "d", 1, "k", 60000)
	waitFor(t, "hot", 5*time.Second, func() bool { _, ok := c.HotSet().Get(Key{"k", 0}); return ok })
	if v, _ := c.Get(ctx, "k"); v != "old" {
		t.Fatalf("got %q", v)
	}
	before := c.Subscriber().Stats().Connects
	// restart the server on the same port; the new one holds another value, written
	// without any invalidation: the reconnect itself must drop the local copy
	_ = srv.cmd.Process.Kill()
	_, _ = srv.cmd.Process.Wait()
	srv2 := startRedisOn(t, srv.Port)
	admin := srv2.Client(t)
	admin.Set(ctx, "k", "v", 0)
	waitFor(t, "a reconnect", 15*time.Second, func() bool { return c.Subscriber().Stats().Connects > before })
	if v, err := c.Get(ctx, "k"); err != nil || v != "v" {
		t.Fatalf("get after restart = %q, %v (a copy from before the restart was served)", v, err)
	}
	publishHot(t, admin, ns, "d2", 1, "k2", 60000)
	waitFor(t, "a key announced after the restart", 5*time.Second, func() bool {
		_, ok := c.HotSet().Get(Key{"k2", 0})
		return ok
	})
}
