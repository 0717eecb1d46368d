package hotkeyd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestIdemStoreOutlivesRedis: defect 2's rule on a real PostgreSQL. A result whose Redis
// record was lost (a restart between Begin and Complete) is still written to the store and
// replayed; a true double completion returns ErrDuplicateCompletion with the first result.
func TestIdemStoreOutlivesRedis(t *testing.T) {
	ctx := context.Background()
	rdb := startRedis(t).Client(t)
	store, err := NewSQLIdempotencyStore(startPostgres(t), "idem_go", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	g, _ := NewIdempotencyGuard(rdb, IdempotencyOptions{Lease: 5 * time.Second, TTL: time.Minute, Store: store})
	lost := func() { // a restart without persistence: every record gone
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}

	a, _ := g.Begin(ctx, "k1", []byte("f"))
	lost()
	if err := g.Complete(ctx, a.Lease, []byte("r1")); err != nil {
		t.Fatal("complete after Redis lost the record:", err)
	}
	lost()
	if b, err := g.Begin(ctx, "k1", []byte("f")); err != nil || b.Outcome != Done || string(b.Result) != "r1" {
		t.Fatal("the retry must replay the stored result:", b, err)
	}
	if b, _ := g.Begin(ctx, "k1", []byte("f")); b.Outcome != Done || string(b.Result) != "r1" {
		t.Fatal("Redis learnt the result again:", b)
	}
	lost()
	if b, _ := g.Begin(ctx, "k1", []byte("other")); b.Outcome != Mismatch {
		t.Fatal("another request under the key, from the store:", b)
	}

	// The operation ran twice (Redis forgot the first holder): the second completion wins
	// the store, the first is told it is a duplicate, with the result retries will see.
	first, _ := g.Begin(ctx, "k2", []byte("f"))
	lost()
	second, _ := g.Begin(ctx, "k2", []byte("f"))
	if second.Outcome != New {
		t.Fatal(second)
	}
	if err := g.Complete(ctx, second.Lease, []byte("from second")); err != nil {
		t.Fatal(err)
	}
	lost()
	err = g.Complete(ctx, first.Lease, []byte("from first"))
	var dup *DuplicateCompletionError
	if !errors.Is(err, ErrDuplicateCompletion) || !errors.As(err, &dup) || string(dup.Stored) != "from second" {
		t.Fatal("a true double completion:", err)
	}
	if b, _ := g.Begin(ctx, "k2", []byte("f")); b.Outcome != Done || string(b.Result) != "from second" {
		t.Fatal(b)
	}
	if s := g.Stats(); s.Duplicates != 1 || s.StoreReplays < 2 {
		t.Fatalf("stats %+v", s)
	}

	// A record taken over by another holder stays refused: that holder completes.
	stale, _ := NewIdempotencyGuard(rdb, IdempotencyOptions{Lease: 50 * time.Millisecond, TTL: time.Minute, Store: store})
	old, _ := stale.Begin(ctx, "k3", []byte("f"))
	time.Sleep(100 * time.Millisecond)
	if nb, _ := stale.Begin(ctx, "k3", []byte("f")); !nb.Takeover {
		t.Fatal(nb)
	}
	if err := stale.Complete(ctx, old.Lease, []byte("stale")); !errors.Is(err, ErrLeaseLost) {
		t.Fatal("a fenced holder:", err)
	}
}
