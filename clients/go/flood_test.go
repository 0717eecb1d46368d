package hotkeyd

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A flood of small (forged) messages must cost the subscriber about the same whether it
// holds no keys or 100,000: per-message work never scans the whole hot set, so
// invalidations behind the flood are not delayed. Measured as a ratio in one run.
func TestMessageFloodCostDoesNotGrowWithTheHotSet(t *testing.T) {
	srv := startRedis(t)
	c := srv.Client(t)
	ns := Namespace{Prefix: "flood"}
	var invalidations atomic.Int64
	sub := NewSubscriber(SubscriberOptions{
		Client: srv.Client(t), Namespace: ns,
		OnInvalidate: func(string, [][]byte) { invalidations.Add(1) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	const n = 2000
	flood := func() time.Duration {
		want := invalidations.Load() + 1
		start := time.Now()
		pipe := c.Pipeline()
		for i := 0; i < n; i++ { // valid envelope, nothing to apply: the cheapest message
			pipe.Publish(ctx, ns.EventsChannel(), `{"v":1,"instance":"x","seq":1,"ts":1}`)
		}
		pipe.Publish(ctx, ns.InvalidateChannel(), `{"v":1,"origin":"o","keys":[{"key":"a"}]}`)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
		for invalidations.Load() < want {
			if ctx.Err() != nil {
				t.Fatal("the invalidation behind the flood never arrived")
			}
			time.Sleep(time.Millisecond)
		}
		return time.Since(start)
	}
	empty := flood()

	now := float64(time.Now().UnixNano()) / 1e9
	pipe := c.Pipeline()
	for i := 0; i < 10; i++ { // 10 instances x 10,000 keys (the per-instance cap)
		var b strings.Builder
		for j := 0; j < 10_000; j++ {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `{"key":"k%d-%d","rate":1,"rule":"r","ttl_ms":60000}`, i, j)
		}
		pipe.Publish(ctx, ns.EventsChannel(), fmt.Sprintf(`{"v":1,"instance":"f%d","seq":1,"ts":%.3f,"hot":[%s]}`, i, now, b.String()))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	for sub.HotSet().Len() < 100_000 {
		if ctx.Err() != nil {
			t.Fatalf("only %d keys held", sub.HotSet().Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
	full := flood()
	t.Logf("%d messages then an invalidation: %v holding no keys, %v holding 100,000", n, empty, full)
	if full > 5*empty+time.Second {
		t.Fatalf("a message costs more as the hot set grows: %v with 100,000 keys vs %v with none", full, empty)
	}
}
