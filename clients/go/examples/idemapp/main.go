// idemapp drives the idempotency guard one request per stdin line, for the cross-language
// tests (tests/interop/test_idempotency.py): a key begun by one language's guard is
// completed by another's and replayed by a third, on one Redis.
//
// stdin, one JSON object a line: {"op":"begin","key":k,"fp":f} | {"op":"complete"|"fail",
// "key":k,"token":"t","result":r} | {"op":"release"|"extend","key":k,"token":"t"}.
// stdout, one JSON object a line: {"outcome":"new","token":"t","takeover":b} |
// {"outcome":"done","result":r,"failed":b} | {"outcome":"in_progress","retry_after_ms":n} |
// {"outcome":"mismatch"} | {"ok":true} | {"error":"lease_lost"|"unavailable"|...}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

func main() {
	url := flag.String("url", "redis://127.0.0.1:6379/0", "redis:// URL")
	leaseMs := flag.Int("lease-ms", 10000, "lease (ms)")
	flag.Parse()
	opt, err := redis.ParseURL(*url)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rdb := redis.NewClient(opt)
	g, err := hotkeyd.NewIdempotencyGuard(rdb, hotkeyd.IdempotencyOptions{Lease: time.Duration(*leaseMs) * time.Millisecond, TTL: time.Hour})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	out := json.NewEncoder(os.Stdout)
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var req struct{ Op, Key, Fp, Token, Result string }
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			_ = out.Encode(map[string]any{"error": "bad request: " + err.Error()})
			continue
		}
		_ = out.Encode(handle(ctx, g, req.Op, req.Key, req.Fp, req.Token, req.Result))
	}
}

func handle(ctx context.Context, g *hotkeyd.IdempotencyGuard, op, key, fp, token, result string) map[string]any {
	if op == "begin" {
		b, err := g.Begin(ctx, key, []byte(fp))
		if err != nil {
			return map[string]any{"error": err.Error()}
		}
		switch b.Outcome {
		case hotkeyd.New:
			return map[string]any{"outcome": "new", "token": strconv.FormatInt(b.Lease.Token, 10), "takeover": b.Takeover}
		case hotkeyd.Done:
			return map[string]any{"outcome": "done", "result": string(b.Result), "failed": b.Failed}
		case hotkeyd.InProgress:
			return map[string]any{"outcome": "in_progress", "retry_after_ms": b.RetryAfter.Milliseconds()}
		}
		return map[string]any{"outcome": "mismatch"}
	}
	tok, err := strconv.ParseInt(token, 10, 64)
	if err != nil {
		return map[string]any{"error": "bad token"}
	}
	l := g.ResumeLease(key, tok)
	switch op {
	case "complete":
		err = g.Complete(ctx, l, []byte(result))
	case "fail":
		err = g.Fail(ctx, l, []byte(result))
	case "release":
		err = g.Release(ctx, l)
	case "extend":
		err = g.Extend(ctx, l, 0)
	default:
		return map[string]any{"error": "unknown op " + op}
	}
	switch {
	case err == nil:
		return map[string]any{"ok": true}
	case errors.Is(err, hotkeyd.ErrLeaseLost):
		return map[string]any{"error": "lease_lost"}
	case errors.Is(err, hotkeyd.ErrIdempotencyUnavailable):
		return map[string]any{"error": "unavailable"}
	}
	return map[string]any{"error": err.Error()}
}
