package hotkeyd

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisServer is a throwaway redis-server on a free port (the tests use real servers).
type redisServer struct {
	Port int
	cmd  *exec.Cmd
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startRedis(t testing.TB, extra ...string) *redisServer {
	t.Helper()
	return startRedisOn(t, freePort(t), extra...)
}

// startRedisOn starts redis-server on port (a restart reuses its predecessor's port).
func startRedisOn(t testing.TB, port int, extra ...string) *redisServer {
	t.Helper()
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	if _, err := exec.LookPath(bin); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server is required in CI: %v", err)
		}
		t.Skip("redis-server not installed")
	}
	dir := t.TempDir()
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, extra...)
	cmd := exec.Command(bin, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &redisServer{Port: port, cmd: cmd}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d did not start", port)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func (s *redisServer) Addr() string { return fmt.Sprintf("127.0.0.1:%d", s.Port) }

func (s *redisServer) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// commandCalls reads `calls` of one command from INFO commandstats (what the server saw).
func commandCalls(t testing.TB, c *redis.Client, command string) int64 {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var calls int64
	prefix := "cmdstat_" + command + ":calls="
	for _, line := range splitLines(info) {
		if len(line) > len(prefix) && line[:len(prefix)] == prefix {
			rest := line[len(prefix):]
			end := 0
			for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
				end++
			}
			calls, _ = strconv.ParseInt(rest[:end], 10, 64)
		}
	}
	return calls
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			line := s[start:i]
			if len(line) > 0 && line[len(line)-1] == '\r' {
				line = line[:len(line)-1]
			}
			out = append(out, line)
			start = i + 1
		}
	}
	return out
}
