package hotkeyd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestLuaMatchesSpec(t *testing.T) {
	entries, err := luaFS.ReadDir("lua")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no embedded Lua: %v", err)
	}
	for _, e := range entries {
		ours, _ := luaFS.ReadFile("lua/" + e.Name())
		spec, err := os.ReadFile(filepath.Join("..", "..", "spec", "lua", e.Name()))
		if err != nil || string(ours) != string(spec) {
			t.Errorf("lua/%s differs from spec/lua (run go generate): %v", e.Name(), err)
		}
	}
}

func TestKeySlot(t *testing.T) {
	// Values from redis-py's redis.crc.key_slot (the reference the Python client uses).
	for k, want := range map[string]int{"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{}x": 10595, "": 0, "stock:1:shard:0": 7050, "{a}{b}": 15495} {
		if got := KeySlot(k); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", k, got, want)
		}
	}
}

func TestShardedCounterNeverOversells(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	for _, spread := range []bool{false, true} {
		t.Run(fmt.Sprintf("spread=%v", spread), func(t *testing.T) {
			c, err := NewShardedCounter(srv.Client(t), fmt.Sprintf("stock:%v", spread), ShardedCounterOptions{Shards: 4, Spread: spread})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.SetTotal(ctx, 1000); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var taken int64
			var wg sync.WaitGroup
			for w := 0; w < 8; w++ {
				wg.Add(1)
				go func(w int) {
					defer wg.Done()
					for i := 0; ; i++ {
						amount := int64(1 + (i+w)%3)
						_, ok, err := c.Take(ctx, []byte(fmt.Sprintf("w%d-%d", w, i)), amount)
						if err != nil {
							t.Error(err)
							return
						}
						if !ok {
							if amount == 1 {
								return // sold out even for one unit
							}
							continue
						}
						mu.Lock()
						taken += amount
						mu.Unlock()
					}
				}(w)
			}
			wg.Wait()
			left, err := c.Value(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if taken != 1000 || left != 0 {
				t.Fatalf("taken %d, left %d: want exactly 1000 taken and 0 left", taken, left)
			}
		})
	}
}

func TestTakeGathersUnitsFromSeveralShards(t *testing.T) {
	srv := startRedis(t)
	ctx := context.Background()
	c, _ := NewShardedCounter(srv.Client(t), "gather", ShardedCounterOptions{Shards: 4, Spread: true})
	_ = c.SetTotal(ctx, 4) // one unit per shard
	left, ok, err := c.Take(ctx, []byte("x"), 2)
	if err != nil || !ok || left != 2 {
		t.Fatalf("take(2) of 4 units spread one per shard = %d, %v, %v", left, ok, err)
	}
	if _, ok, _ := c.Take(ctx, []byte("y"), 3); ok {
		t.Fatal("took 3 of 2 units")
	}
	if v, _ := c.Value(ctx); v != 2 {
		t.Fatalf("a refused take changed the stock: %d", v)
	}
}
