// The Go stale-read app: reads hot keys through HotCache as a service would. Protocol:
// tests/stale/apps/reader.py (arguments, one log line per read with CLOCK_MONOTONIC times,
// ready/done on stdout, stop or EOF on stdin).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

// mono is CLOCK_MONOTONIC in ns: the clock every process on the host shares (Go's own
// monotonic reading is not exposed as a number).
func mono() int64 {
	var ts syscall.Timespec
	_, _, _ = syscall.RawSyscall(syscall.SYS_CLOCK_GETTIME, 1, uintptr(unsafe.Pointer(&ts)), 0)
	return ts.Sec*1e9 + ts.Nsec
}

func genOf(v string, err error) int64 {
	if err == redis.Nil {
		return -1
	}
	if err != nil || !strings.HasPrefix(v, "g:") {
		return -2
	}
	s := strings.SplitN(v[2:], ":", 2)[0]
	g, perr := strconv.ParseInt(s, 10, 64)
	if perr != nil {
		return -2
	}
	return g
}

func main() {
	url := flag.String("url", "", "redis:// URL of a single node")
	cluster := flag.String("cluster", "", "comma-separated seed nodes of a Redis Cluster")
	keysArg := flag.String("keys", "", "hot keys, read round-robin")
	flashArg := flag.String("flash", "", "KEY,T0,T1: also read KEY while CLOCK_MONOTONIC is in [T0,T1) ns")
	rate := flag.Float64("rate", 2000, "reads per second")
	cold := flag.Int("cold-keys", 0, "one cold read per 20 reads")
	prefix := flag.String("namespace", "hotkeyd", "namespace prefix")
	mode := flag.String("mode", "available", "available or strict")
	sharded := flag.Bool("sharded", false, "sharded pub/sub")
	logPath := flag.String("log", "", "read log")
	flag.Parse()
	consistency := hotkeyd.Available
	switch *mode {
	case "available":
	case "strict":
		consistency = hotkeyd.Strict // the SDK option of issue 25 (strict mode)
	default:
		fmt.Fprintln(os.Stderr, "unknown mode", *mode)
		os.Exit(2)
	}
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
	cache := hotkeyd.NewHotCache(client, hotkeyd.CacheOptions{
		Namespace: hotkeyd.Namespace{Prefix: *prefix}, Sharded: *sharded, Consistency: consistency,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	if err := cache.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
		os.Exit(1)
	}
	cancel()
	defer cache.Close()
	keys := strings.Split(*keysArg, ",")
	flash, f0, f1 := "", int64(0), int64(0)
	if *flashArg != "" {
		p := strings.Split(*flashArg, ",")
		flash = p[0]
		f0, _ = strconv.ParseInt(p[1], 10, 64)
		f1, _ = strconv.ParseInt(p[2], 10, 64)
	}
	var stopped atomic.Bool
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			if strings.TrimSpace(sc.Text()) == "stop" {
				break
			}
		}
		stopped.Store(true)
	}()
	f, err := os.Create(*logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := bufio.NewWriterSize(f, 1<<16)
	fmt.Println(`{"event":"ready","lang":"go"}`)
	interval := time.Duration(float64(time.Second) / *rate)
	next := time.Now()
	var reads, errs int64
	bg := context.Background()
	n := len(keys)
	for i := 0; !stopped.Load(); i++ {
		t0 := mono()
		idx := i % (n + 1)
		if idx == n && !(flash != "" && f0 <= t0 && t0 < f1) {
			idx = i % n
		}
		key := flash
		if idx < n {
			key = keys[idx]
		}
		st := cache.Stats()
		before := st.Hits + st.StaleHits
		v, err := cache.Get(bg, key)
		t1 := mono()
		st = cache.Stats()
		local := 0
		if st.Hits+st.StaleHits > before {
			local = 1
		}
		if err != nil && err != redis.Nil {
			errs++
		}
		fmt.Fprintf(out, "%d %d %d %d %d\n", idx, genOf(v, err), t0, t1, local)
		reads++
		if *cold > 0 && i%20 == 0 {
			_, _ = cache.Get(bg, fmt.Sprintf("cold:%d", (i/20)%*cold))
		}
		next = next.Add(interval)
		if d := time.Until(next); d > 500*time.Microsecond {
			time.Sleep(d)
		} else if d < -time.Second {
			next = time.Now()
		}
	}
	_ = out.Flush()
	_ = f.Close()
	st := cache.Stats()
	b, _ := json.Marshal(map[string]any{"event": "done", "lang": "go", "reads": reads, "errors": errs, "local_hits": st.Hits + st.StaleHits})
	fmt.Println(string(b))
}
