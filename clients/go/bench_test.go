package hotkeyd

// Benchmarks (not run by `go test`; run `go test -run '^$' -bench . -benchtime 2s`):
// a hot HotCache.Get against a go-redis GET on loopback, and the cold-path overhead
// (a cold key through the cache against the same GET without it).

import (
	"context"
	"testing"
	"time"
)

func benchCache(b *testing.B) (*HotCache, *redisServer) {
	b.Helper()
	srv := startRedis(b)
	admin := srv.Client(b)
	ctx := context.Background()
	admin.Set(ctx, "hot", "value-of-some-length-0123456789", 0)
	admin.Set(ctx, "cold", "value-of-some-length-0123456789", 0)
	ns := Namespace{Prefix: "bench"}
	c := NewHotCache(srv.Client(b), CacheOptions{Namespace: ns})
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	msg := `{"v":1,"instance":"d","seq":1,"ts":1,"full":true,"final":false,"cool":[],` +
		`"hot":[{"key":"hot","rate":1,"rule":"r","ttl_ms":600000,"since":0}]}`
	admin.Publish(ctx, ns.EventsChannel(), msg)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := c.HotSet().Get(Key{"hot", 0}); ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the key never turned hot")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return c, srv
}

func BenchmarkHotCacheGetHot(b *testing.B) {
	c, _ := benchCache(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Get(ctx, "hot"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkHotCacheGetHotParallel(b *testing.B) {
	c, _ := benchCache(b)
	ctx := context.Background()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Get(ctx, "hot"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkHotCacheGetCold(b *testing.B) {
	c, _ := benchCache(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Get(ctx, "cold"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGoRedisGet(b *testing.B) {
	_, srv := benchCache(b)
	r := srv.Client(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := r.Get(ctx, "cold").Result(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInterleaved measures, in one loop, a hot HotCache.Get, a cold HotCache.Get and
// a plain go-redis GET, alternating, so machine noise hits all three alike; it reports
// each one's ns and the two ratios the README quotes.
func BenchmarkInterleaved(b *testing.B) {
	c, srv := benchCache(b)
	r := srv.Client(b)
	ctx := context.Background()
	var hot, cold, plain time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		for j := 0; j < 100; j++ {
			_, _ = c.Get(ctx, "hot")
		}
		t1 := time.Now()
		_, _ = c.Get(ctx, "cold")
		t2 := time.Now()
		_, _ = r.Get(ctx, "cold").Result()
		t3 := time.Now()
		hot += t1.Sub(t0)
		cold += t2.Sub(t1)
		plain += t3.Sub(t2)
	}
	n := float64(b.N)
	b.ReportMetric(float64(hot.Nanoseconds())/n/100, "hot-ns")
	b.ReportMetric(float64(cold.Nanoseconds())/n, "cold-ns")
	b.ReportMetric(float64(plain.Nanoseconds())/n, "get-ns")
	b.ReportMetric(float64(plain)/float64(hot)*100, "hot-speedup-x")
	b.ReportMetric((float64(cold)/float64(plain)-1)*100, "cold-overhead-%")
}
