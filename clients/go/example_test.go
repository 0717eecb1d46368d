package hotkeyd_test

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"testing"
	"time"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

// readmeExample is the example in clients/go/README.md, kept compiling and passing here.
func readmeExample(addr string) (string, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr}) // or redis.NewClusterClient(...)
	defer rdb.Close()

	cache := hotkeyd.NewHotCache(rdb, hotkeyd.CacheOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := cache.Start(ctx); err != nil { // subscribe, then read the daemon's snapshots
		return "", err
	}
	defer cache.Close()

	if err := cache.Set(ctx, "product:1", "v1", 0); err != nil { // SET + invalidation, one round trip
		return "", err
	}
	return cache.Get(ctx, "product:1") // served locally while the daemon says it is hot
}

func TestReadmeExample(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--save", "", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() }()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for i := 0; i < 200; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	v, err := readmeExample(addr)
	if err != nil || v != "v1" {
		t.Fatalf("README example: %q, %v", v, err)
	}
}
