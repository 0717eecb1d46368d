package hotkeyd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type idemVectors struct {
	Defaults     map[string]any `json:"defaults"`
	Fingerprints []struct {
		Parts  []string `json:"parts"`
		Digest string   `json:"digest"`
	} `json:"fingerprints"`
	Records []struct {
		Prefix, Scope, Key, Record string
	} `json:"records"`
	Cases []struct {
		Name  string           `json:"name"`
		Steps []map[string]any `json:"steps"`
	} `json:"cases"`
	HTTP struct {
		ProblemType string `json:"problem_type"`
		ContentType string `json:"content_type"`
		Scopes      []struct {
			Authorization *string `json:"authorization"`
			User          *string `json:"user"`
			Key           string  `json:"key"`
			ScopedKey     string  `json:"scoped_key"`
			Record        string  `json:"record"`
		} `json:"scopes"`
		Problems []struct {
			Status int    `json:"status"`
			Title  string `json:"title"`
			Detail string `json:"detail"`
		} `json:"problems"`
		RetryAfter []struct {
			LeaseLeftMs int64    `json:"lease_left_ms"`
			MedianMs    *float64 `json:"median_ms"`
			RetryAfter  string   `json:"retry_after"`
		} `json:"retry_after"`
	} `json:"http"`
}

func loadIdemVectors(t *testing.T) (idemVectors, []map[string]any) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "spec", "vectors", "idempotency.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v idemVectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	var generic struct {
		Cases []map[string]any `json:"cases"`
	}
	if err := json.Unmarshal(raw, &generic); err != nil {
		t.Fatal(err)
	}
	return v, generic.Cases
}

func TestIdemDigestVectors(t *testing.T) {
	v, _ := loadIdemVectors(t)
	for _, f := range v.Fingerprints {
		parts := make([][]byte, len(f.Parts))
		for i, p := range f.Parts {
			parts[i] = []byte(p)
		}
		if got := IdempotencyFingerprint(parts...); got != f.Digest {
			t.Errorf("fingerprint(%q) = %s, want %s", f.Parts, got, f.Digest)
		}
	}
	for _, r := range v.Records {
		if got := (Namespace{Prefix: r.Prefix}).IdempotencyRecord(RecordDigest(r.Scope, r.Key)); got != r.Record {
			t.Errorf("record(%q, %q) = %s, want %s", r.Scope, r.Key, got, r.Record)
		}
	}
}

func num(v any) int64 { f, _ := v.(float64); return int64(f) }

func fencedOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, ErrIdempotencyUnavailable):
		return "unavailable"
	}
	return err.Error()
}

// TestIdemVectors drives the guard through spec/vectors/idempotency.json on a real Redis.
func TestIdemVectors(t *testing.T) {
	v, cases := loadIdemVectors(t)
	srv := startRedis(t)
	ctx := context.Background()
	for _, raw := range cases {
		c := map[string]any{}
		for k, x := range v.Defaults {
			c[k] = x
		}
		for k, x := range raw {
			c[k] = x
		}
		t.Run(c["name"].(string), func(t *testing.T) {
			addr := srv.Addr()
			if c["redis"] == "down" {
				addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
			}
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialerRetries: 1, DialTimeout: 2 * time.Second})
			defer rdb.Close()
			if c["redis"] == "up" {
				rdb.FlushAll(ctx)
			}
			ns := Namespace{Prefix: c["prefix"].(string)}
			guards := map[string]*IdempotencyGuard{}
			guard := func(step map[string]any) *IdempotencyGuard {
				scope := c["scope"].(string)
				if s, ok := step["scope"].(string); ok {
					scope = s
				}
				if g := guards[scope]; g != nil {
					return g
				}
				audit := int(num(c["audit_maxlen"]))
				if audit == 0 {
					audit = -1
				}
				g, err := NewIdempotencyGuard(rdb, IdempotencyOptions{
					Lease: time.Duration(num(c["lease_ms"])) * time.Millisecond, TTL: time.Duration(num(c["ttl_ms"])) * time.Millisecond,
					Namespace: ns, Scope: scope, AuditMaxLen: audit, MaxKeyLength: int(num(c["max_key_length"])),
					FailOpen: c["on_error"] == "open",
				})
				if err != nil {
					t.Fatal(err)
				}
				guards[scope] = g
				return g
			}
			leases := map[string]*Lease{}
			for i, step := range raw["steps"].([]any) {
				s := step.(map[string]any)
				where := fmt.Sprintf("step %d %v", i, s)
				switch op := s["op"].(string); op {
				case "sleep":
					time.Sleep(time.Duration(num(s["ms"])) * time.Millisecond)
				case "begin":
					want := s["expect"].(map[string]any)
					b, err := guard(s).Begin(ctx, s["key"].(string), []byte(s["fingerprint"].(string)))
					if e, ok := want["error"]; ok {
						if (e == "key" && !errors.Is(err, ErrIdempotencyKey)) || (e == "unavailable" && !errors.Is(err, ErrIdempotencyUnavailable)) {
							t.Fatalf("%s: got %v, %v", where, b, err)
						}
						continue
					}
					if err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if b.Outcome.String() != want["outcome"] {
						t.Fatalf("%s: outcome %v", where, b.Outcome)
					}
					if x, ok := want["takeover"]; ok && b.Takeover != x.(bool) {
						t.Fatalf("%s: takeover %v", where, b.Takeover)
					}
					if x, ok := want["guarded"]; ok && b.Lease.Guarded != x.(bool) {
						t.Fatalf("%s: guarded %v", where, b.Lease.Guarded)
					}
					if x, ok := want["token_above"]; ok && b.Lease.Token <= leases[x.(string)].Token {
						t.Fatalf("%s: token %d not above %d", where, b.Lease.Token, leases[x.(string)].Token)
					}
					if x, ok := want["retry_after_ms_max"]; ok && (b.RetryAfter <= 0 || b.RetryAfter.Milliseconds() > num(x)) {
						t.Fatalf("%s: retry after %v", where, b.RetryAfter)
					}
					if x, ok := want["result"]; ok && string(b.Result) != x.(string) {
						t.Fatalf("%s: result %q", where, b.Result)
					}
					if x, ok := want["failed"]; ok && b.Failed != x.(bool) {
						t.Fatalf("%s: failed %v", where, b.Failed)
					}
					if as, ok := s["as"].(string); ok && b.Lease != nil {
						leases[as] = b.Lease
					}
				case "complete", "fail", "release", "extend":
					g, l := guard(s), leases[s["lease"].(string)]
					res, _ := s["result"].(string)
					var err error
					switch op {
					case "complete":
						err = g.Complete(ctx, l, []byte(res))
					case "fail":
						err = g.Fail(ctx, l, []byte(res))
					case "release":
						err = g.Release(ctx, l)
					default:
						err = g.Extend(ctx, l, 0)
					}
					if got := fencedOutcome(err); got != s["expect"] {
						t.Fatalf("%s: got %s", where, got)
					}
				case "record":
					want := s["expect"].(map[string]any)
					rec := rdb.HGetAll(ctx, ns.IdempotencyRecord(RecordDigest(c["scope"].(string), s["key"].(string)))).Val()
					if want["absent"] == true {
						if len(rec) != 0 {
							t.Fatalf("%s: record %v", where, rec)
						}
						continue
					}
					if rec["st"] != want["st"] {
						t.Fatalf("%s: record %v", where, rec)
					}
					if x, ok := want["res"]; ok && rec["res"] != x {
						t.Fatalf("%s: record %v", where, rec)
					}
					if x, ok := want["fingerprint"]; ok && rec["fp"] != IdempotencyFingerprint([]byte(x.(string))) {
						t.Fatalf("%s: record %v", where, rec)
					}
					if x, ok := want["token_of"]; ok && rec["tok"] != fmt.Sprint(leases[x.(string)].Token) {
						t.Fatalf("%s: record %v", where, rec)
					}
				case "audit":
					var got []any
					for _, m := range rdb.XRange(ctx, ns.IdempotencyAudit(), "-", "+").Val() {
						got = append(got, m.Values["ev"])
					}
					if fmt.Sprint(got) != fmt.Sprint(s["expect"]) {
						t.Fatalf("%s: audit %v", where, got)
					}
				default:
					t.Fatalf("unknown op %q", op)
				}
			}
		})
	}
}

// The keep-alive really renews while the work runs, and stops when it ends.
func TestIdemKeepAliveRenewsAndStops(t *testing.T) {
	srv := startRedis(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	g, _ := NewIdempotencyGuard(rdb, IdempotencyOptions{Lease: 300 * time.Millisecond, TTL: time.Minute})
	b, err := g.Begin(ctx, "long", nil)
	if err != nil || b.Outcome != New {
		t.Fatal(b, err)
	}
	wctx, ka := g.KeepAlive(ctx, b.Lease, 0)
	time.Sleep(800 * time.Millisecond) // well past the lease
	if again, _ := g.Begin(ctx, "long", nil); again.Outcome != InProgress {
		t.Fatalf("renewed lease taken over: %v", again.Outcome)
	}
	ka.Stop()
	beats := ka.Beats.Load()
	if beats < 2 || wctx.Err() == nil {
		t.Fatalf("beats %d, ctx %v", beats, wctx.Err())
	}
	time.Sleep(500 * time.Millisecond)
	if ka.Beats.Load() != beats {
		t.Fatal("renewals went on after Stop")
	}
	if again, _ := g.Begin(ctx, "long", nil); again.Outcome != New || !again.Takeover {
		t.Fatalf("after Stop the lease should run out: %v", again.Outcome)
	}
	// The first holder learns it lost the lease: its next renewal is refused.
	wctx2, ka2 := g.KeepAlive(ctx, b.Lease, 50*time.Millisecond)
	select {
	case <-ka2.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("lost lease not noticed")
	}
	if !errors.Is(ka2.Err(), ErrLeaseLost) || wctx2.Err() == nil {
		t.Fatal(ka2.Err(), wctx2.Err())
	}
	ka2.Stop()
	if err := g.Complete(ctx, b.Lease, []byte("stale")); !errors.Is(err, ErrLeaseLost) {
		t.Fatal(err)
	}
}

func TestIdemFailOpenAndClosedOnRedisErrors(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	var seen []string
	g, _ := NewIdempotencyGuard(rdb, IdempotencyOptions{FailOpen: true, OnError: func(op string, _ error) { seen = append(seen, op) }})
	b, err := g.Begin(context.Background(), "k", nil)
	if err != nil || b.Outcome != New || b.Lease.Guarded {
		t.Fatal(b, err)
	}
	if g.Stats().Unavailable != 1 || fmt.Sprint(seen) != "[begin]" {
		t.Fatal(g.Stats(), seen)
	}
	if _, err := NewIdempotencyGuard(rdb, IdempotencyOptions{Lease: time.Minute, TTL: time.Second}); err == nil {
		t.Fatal("ttl < lease accepted")
	}
}

func TestIdemClusterNeedsNoAudit(t *testing.T) {
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}})
	defer c.Close()
	if _, err := NewIdempotencyGuard(c, IdempotencyOptions{}); err == nil || !strings.Contains(err.Error(), "AuditMaxLen: -1") {
		t.Fatal(err)
	}
	if _, err := NewIdempotencyGuard(c, IdempotencyOptions{AuditMaxLen: -1}); err != nil {
		t.Fatal(err)
	}
}

// Many callers at once: exactly one runs (the scripts have no check-then-set).
func TestIdemConcurrentBeginsRunOnce(t *testing.T) {
	srv := startRedis(t)
	g, _ := NewIdempotencyGuard(srv.Client(t), IdempotencyOptions{})
	var wg sync.WaitGroup
	var fresh, busy atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := g.Begin(context.Background(), "race", []byte("f"))
			switch {
			case err != nil:
				t.Error(err)
			case b.Outcome == New:
				fresh.Add(1)
			case b.Outcome == InProgress:
				busy.Add(1)
			}
		}()
	}
	wg.Wait()
	if fresh.Load() != 1 || busy.Load() != 49 {
		t.Fatalf("new %d, in progress %d", fresh.Load(), busy.Load())
	}
}

// The idempotency_keys cases of spec/vectors/limits.json, through the header-key check.
func TestIdemKeyLimitVectors(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "spec", "vectors", "limits.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		IdempotencyKeys []struct {
			Key   string `json:"key"`
			Error bool   `json:"error"`
		} `json:"idempotency_keys"`
	}
	if err := json.Unmarshal(raw, &v); err != nil || len(v.IdempotencyKeys) == 0 {
		t.Fatal("no idempotency_keys vectors", err)
	}
	for _, c := range v.IdempotencyKeys {
		if err := CheckIdempotencyKey(c.Key, MaxIdempotencyKeyHeader); (err != nil) != c.Error {
			t.Errorf("key of %d chars: error %v, want %v", len(c.Key), err, c.Error)
		}
	}
}
