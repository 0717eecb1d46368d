package hotkeyd

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The scenarios of spec/vectors/failure.json (spec/failure.md), against real redis-servers.

type failureScenario struct {
	Name        string `json:"name"`
	TestBoundMs int    `json:"test_bound_ms"`
	TestTTLms   int    `json:"test_ttl_ms"`
	BoundMs     int    `json:"bound_ms"`
	SlackMs     int    `json:"slack_ms"`
}

func failureVector(t *testing.T, name string) failureScenario {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "spec", "vectors", "failure.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct{ Scenarios []failureScenario }
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, s := range doc.Scenarios {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no scenario %s in spec/vectors/failure.json", name)
	return failureScenario{}
}

func msOf(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestStartTimeoutDefaultsToTheSpec(t *testing.T) {
	if DefaultStartTimeout != 5*time.Second {
		t.Fatalf("DefaultStartTimeout = %s, want start_timeout_ms of spec/limits.json", DefaultStartTimeout)
	}
	if got := NewSubscriber(SubscriberOptions{}).o.StartTimeout; got != DefaultStartTimeout {
		t.Fatalf("StartTimeout defaults to %s", got)
	}
}

func TestStartWithRedisDownFailsWithinTheBound(t *testing.T) {
	sc := failureVector(t, "start_redis_down")
	srv := startRedis(t) // for its client options; then nothing listens on its port
	client := srv.Client(t)
	_ = srv.cmd.Process.Kill()
	_, _ = srv.cmd.Process.Wait()
	c := NewHotCache(client, CacheOptions{StartTimeout: msOf(sc.TestBoundMs), DisableDemand: true})
	t0 := time.Now()
	err := c.Start(context.Background()) // no deadline of the app's: the bound is StartTimeout
	took := time.Since(t0)
	if err == nil {
		t.Fatal("Start succeeded with Redis down")
	}
	if !errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start error %v does not wrap ErrUnreachable and DeadlineExceeded", err)
	}
	if took > msOf(sc.TestBoundMs+sc.SlackMs) {
		t.Fatalf("Start failed after %s, bound %d ms", took, sc.TestBoundMs)
	}
	// the app's own ctx still bounds it too, and cancelling it ends Start at once
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c2 := NewHotCache(client, CacheOptions{DisableDemand: true})
	if err := c2.Start(ctx); !errors.Is(err, context.Canceled) || !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Start with a cancelled ctx = %v", err)
	}
}

func TestLostSubscriptionDropsCopiesAndReconnectResyncs(t *testing.T) {
	lost, again := failureVector(t, "subscription_lost"), failureVector(t, "reconnect")
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "fl"}
	c := newCache(t, srv, CacheOptions{Namespace: ns, DisableDemand: true})
	admin.Set(ctx, "k", "old", 0)
	publishHot(t, admin, ns, "d", 1, "k", 60000)
	waitFor(t, "hot", 5*time.Second, func() bool { _, ok := c.HotSet().Get(Key{"k", 0}); return ok })
	if v, _ := c.Get(ctx, "k"); v != "old" {
		t.Fatalf("got %q", v)
	}
	st := c.Subscriber().Stats()
	// a write nobody announces, while the subscription is gone
	if err := admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err(); err != nil {
		t.Fatal(err)
	}
	admin.Set(ctx, "k", "new", 0)
	waitFor(t, "the loss to be counted", msOf(lost.SlackMs), func() bool {
		return c.Subscriber().Stats().Lost > st.Lost
	})
	if v, err := c.Get(ctx, "k"); err != nil || v != "new" {
		t.Fatalf("get after a lost subscription = %q, %v: a copy from before the loss was served", v, err)
	}
	waitFor(t, "the reconnect and its resync", msOf(again.BoundMs+again.SlackMs), func() bool {
		s := c.Subscriber().Stats()
		return s.Connects > st.Connects && s.Resyncs > st.Resyncs
	})
	publishHot(t, admin, ns, "d", 2, "k2", 60000)
	waitFor(t, "announcements followed again", 5*time.Second, func() bool {
		_, ok := c.HotSet().Get(Key{"k2", 0})
		return ok
	})
}

func TestStoppedDaemonKeysExpireByTTL(t *testing.T) {
	sc := failureVector(t, "daemon_stopped")
	srv := startRedis(t)
	admin := srv.Client(t)
	ctx := context.Background()
	ns := Namespace{Prefix: "fd"}
	c := newCache(t, srv, CacheOptions{Namespace: ns, DisableDemand: true})
	admin.Set(ctx, "k", "old", 0)
	publishHot(t, admin, ns, "d", 1, "k", sc.TestTTLms) // and then the daemon says nothing
	waitFor(t, "hot", 5*time.Second, func() bool { _, ok := c.HotSet().Get(Key{"k", 0}); return ok })
	if v, _ := c.Get(ctx, "k"); v != "old" {
		t.Fatalf("got %q", v)
	}
	t0 := time.Now()
	admin.Set(ctx, "k", "new", 0) // not announced
	waitFor(t, "the key to expire", msOf(sc.TestTTLms+sc.SlackMs), func() bool {
		_, ok := c.HotSet().Get(Key{"k", 0})
		return !ok
	})
	if v, err := c.Get(ctx, "k"); err != nil || v != "new" {
		t.Fatalf("get after the TTL = %q, %v", v, err)
	}
	if took := time.Since(t0); took > msOf(sc.TestTTLms+sc.SlackMs) {
		t.Fatalf("served past the TTL: %s", took)
	}
	last := c.Subscriber().Stats().LastNotification
	if age := time.Now().UnixMilli() - last; last == 0 || age < int64(sc.TestTTLms) {
		t.Fatalf("last notification %d ms ago: the stats do not show the daemon's silence", age)
	}
}
