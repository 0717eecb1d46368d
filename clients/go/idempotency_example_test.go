package hotkeyd_test

import (
	"context"
	"log"
	"net/http"
	"time"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

// The README's and docs/idempotency.md's Go example (compiled by go vet and go test).
func ExampleIdempotencyGuard_Middleware() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	guard, err := hotkeyd.NewIdempotencyGuard(rdb, hotkeyd.IdempotencyOptions{Lease: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lease, _ := hotkeyd.IdempotencyLeaseFrom(r.Context()) // renewed while this runs
		_ = lease.Token                                       // fence your own writes with it
		w.WriteHeader(http.StatusCreated)
	})
	mw := guard.Middleware(hotkeyd.IdempotencyPolicy{
		Required: func(r *http.Request) bool { return r.URL.Path == "/order" },
		User:     func(r *http.Request) string { return r.Header.Get("X-User") },
	})
	_ = http.ListenAndServe("127.0.0.1:8080", mw(orders))
}

// The plain API: begin, then complete (or release), with the lease kept alive.
func ExampleIdempotencyGuard_Begin() {
	ctx := context.Background()
	guard, _ := hotkeyd.NewIdempotencyGuard(redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"}), hotkeyd.IdempotencyOptions{})
	b, err := guard.Begin(ctx, "order-7f3a", []byte(`{"sku": 42}`))
	if err != nil {
		log.Fatal(err) // ErrIdempotencyUnavailable (fail closed) or ErrIdempotencyKey
	}
	switch b.Outcome {
	case hotkeyd.New:
		wctx, ka := guard.KeepAlive(ctx, b.Lease, 0) // wctx is cancelled if the lease is lost
		result := placeOrder(wctx, b.Lease.Token)
		ka.Stop()
		if err := guard.Complete(ctx, b.Lease, result); err != nil {
			log.Print(err) // errors.Is(err, hotkeyd.ErrLeaseLost): another caller took over
		}
	case hotkeyd.Done:
		_ = b.Result // replay it as is
	case hotkeyd.InProgress:
		_ = b.RetryAfter
	case hotkeyd.Mismatch: // same key, another request: a client bug (HTTP 422)
	}
}

func placeOrder(ctx context.Context, fence int64) []byte { return []byte(`{"order": 1}`) }
