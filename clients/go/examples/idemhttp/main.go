// idemhttp is a tiny order API behind the idempotency middleware, for the cross-language
// HTTP test (tests/interop/test_idempotency.py): a response stored by one language's
// middleware must replay byte for byte from another's.
//
// POST /order counts an order in Redis (INCR <prefix>:orders) and answers 201 with
// {"order": n, "lang": "go", "request": <body>}. Keys are separate per caller (the
// Authorization header, the default scope).
// Prints {"event":"ready"} once listening.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
	"github.com/redis/go-redis/v9"
)

func main() {
	url := flag.String("url", "redis://127.0.0.1:6379/0", "redis:// URL")
	port := flag.Int("port", 8080, "port on 127.0.0.1")
	prefix := flag.String("prefix", "hotkeyd", "namespace prefix")
	flag.Parse()
	opt, err := redis.ParseURL(*url)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	guard, err := hotkeyd.NewIdempotencyGuard(rdb, hotkeyd.IdempotencyOptions{
		Lease: 10 * time.Second, Namespace: hotkeyd.Namespace{Prefix: *prefix}})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /order", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		n := rdb.Incr(r.Context(), *prefix+":orders").Val()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-App", "go")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"order": n, "lang": "go", "request": string(body)})
	})
	mw := guard.Middleware(hotkeyd.IdempotencyPolicy{
		Required: func(r *http.Request) bool { return r.URL.Path == "/order" },
	})
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", *port))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintln(os.Stdout, `{"event":"ready"}`)
	log.Fatal(http.Serve(ln, mw(mux)))
}
