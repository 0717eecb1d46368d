// readapp is a small app that reads one key through HotCache at a steady rate, the way a
// service would. The cross-language end-to-end tests (tests/interop) run it beside the
// Python, Java and Node versions against a real daemon.
//
// stdout, one JSON object a line: {"event":"ready"}, {"event":"value","value":...} when
// the value read changes, {"event":"stats",...} every second, {"event":"done",...}.
// stdin: "set <value>" writes the key through the cache; "stop" ends the run.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

var outMu sync.Mutex

func emit(v map[string]any) {
	v["t"] = float64(time.Now().UnixNano()) / 1e6 // when it happened (unix ms)
	outMu.Lock()
	defer outMu.Unlock()
	b, _ := json.Marshal(v)
	fmt.Println(string(b))
}

func main() {
	url := flag.String("url", "", "redis:// URL of a single node")
	cluster := flag.String("cluster", "", "comma-separated seed nodes of a Redis Cluster")
	key := flag.String("key", "product:1", "the key to read")
	rate := flag.Float64("rate", 1000, "reads per second")
	cold := flag.Int("cold-keys", 0, "also read this many cold keys, one per 20 reads")
	prefix := flag.String("namespace", "hotkeyd", "hotkeyd namespace prefix")
	seconds := flag.Float64("seconds", 3600, "stop after this long")
	sharded := flag.Bool("sharded", false, "sharded pub/sub (SSUBSCRIBE/SPUBLISH), as the daemon's --sharded-pubsub")
	consistency := flag.String("consistency", "available", "available or strict (docs/consistency.md)")
	flag.Parse()

	var client redis.UniversalClient
	if *cluster != "" {
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(*cluster, ",")})
	} else {
		opt, err := redis.ParseURL(*url)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		client = redis.NewClient(opt)
	}
	defer client.Close()
	cache := hotkeyd.NewHotCache(client, hotkeyd.CacheOptions{Namespace: hotkeyd.Namespace{Prefix: *prefix}, Sharded: *sharded,
		Consistency: hotkeyd.Consistency(*consistency)})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	if err := cache.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		os.Exit(1)
	}
	cancel()
	defer cache.Close()
	emit(map[string]any{"event": "ready", "lang": "go", "origin": cache.Origin()})

	stop := make(chan struct{})
	var once sync.Once
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "set "):
				v := strings.TrimPrefix(line, "set ")
				if err := cache.Set(context.Background(), *key, v, 0); err != nil {
					emit(map[string]any{"event": "error", "error": err.Error()})
					continue
				}
				emit(map[string]any{"event": "wrote", "value": v})
			case line == "stop":
				once.Do(func() { close(stop) })
				return
			}
		}
		once.Do(func() { close(stop) })
	}()

	interval := time.Duration(float64(time.Second) / *rate)
	next := time.Now()
	end := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	lastStats := time.Now()
	var reads, errs, misses int64
	missing := false
	last := "\x00none"
	prevT := 0.0
	for i := 0; time.Now().Before(end); i++ {
		select {
		case <-stop:
			end = time.Now()
			continue
		default:
		}
		v, err := cache.Get(context.Background(), *key)
		nowT := float64(time.Now().UnixNano()) / 1e6
		reads++
		if m := cache.WatchStats().StrictMisses; *consistency == "strict" {
			// {"event":"source","local":...} when strict mode switches between local copies
			// and Redis reads (a read strict mode sent to Redis counts a miss)
			if miss := m > misses; i == 0 || miss != missing {
				missing = miss
				emit(map[string]any{"event": "source", "local": !miss})
			}
			misses = m
		}
		if err != nil && err != redis.Nil {
			errs++
		} else {
			if v != last {
				last = v
				// prev_t: when the previous read (still the old value) returned (unix ms)
				emit(map[string]any{"event": "value", "value": v, "prev_t": prevT})
			}
			prevT = nowT
		}
		if *cold > 0 && i%20 == 0 {
			_, _ = cache.Get(context.Background(), fmt.Sprintf("cold:%d", (i/20)%*cold))
		}
		if time.Since(lastStats) >= time.Second {
			lastStats = time.Now()
			_, hot := cache.HotSet().Get(hotkeyd.Key{Bytes: *key})
			st := cache.Stats()
			emit(map[string]any{"event": "stats", "reads": reads, "errors": errs, "hot": hot,
				"local_hits": st.Hits + st.StaleHits, "demand": cache.DemandStats(),
				"lapsed": cache.WatchStats().Lapsed, "strict_misses": cache.WatchStats().StrictMisses})
		}
		next = next.Add(interval)
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		} else if d < -time.Second {
			next = time.Now() // fell behind: do not burst to catch up
		}
	}
	st := cache.Stats()
	emit(map[string]any{"event": "done", "reads": reads, "errors": errs, "local_hits": st.Hits + st.StaleHits})
}
