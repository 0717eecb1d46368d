package hotkeyd

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func post(t *testing.T, url, key, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestIdemMiddleware(t *testing.T) {
	srv := startRedis(t)
	g, _ := NewIdempotencyGuard(srv.Client(t), IdempotencyOptions{Lease: 300 * time.Millisecond, TTL: time.Minute})
	var runs, booms atomic.Int64
	slowStarted := make(chan struct{}, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("/order", func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		l, ok := IdempotencyLeaseFrom(r.Context())
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "slow") {
			slowStarted <- struct{}{}
			time.Sleep(time.Second) // over three leases: only the keep-alive keeps it ours
		}
		if strings.Contains(string(body), "boom") && booms.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d,"leased":%v,"body":%q}`, n, ok && l.Token > 0, body)
	})
	ts := httptest.NewServer(g.Middleware(IdempotencyPolicy{Required: func(r *http.Request) bool { return r.URL.Path == "/order" }})(mux))
	defer ts.Close()
	url := ts.URL + "/order"

	r1, b1 := post(t, url, "k1", "a")
	if r1.StatusCode != 201 || b1 != `{"run":1,"leased":true,"body":"a"}` {
		t.Fatal(r1.StatusCode, b1)
	}
	r2, b2 := post(t, url, "k1", "a")
	if r2.StatusCode != 201 || b2 != b1 || r2.Header.Get(ReplayedHeader) != "true" || r2.Header.Get("Content-Type") != "application/json" {
		t.Fatal(r2.StatusCode, b2, r2.Header)
	}
	if r, _ := post(t, url, "k1", "b"); r.StatusCode != 422 {
		t.Fatal("other body:", r.StatusCode)
	}
	if r, _ := post(t, url, "", "a"); r.StatusCode != 400 {
		t.Fatal("no key:", r.StatusCode)
	}
	if r, _ := post(t, url, "k2", "a", "Idempotency-Key", "k3"); r.StatusCode != 400 {
		t.Fatal("two keys:", r.StatusCode)
	}
	if r, _ := post(t, url, "caf\u00e9", "a"); r.StatusCode != 400 {
		t.Fatal("non-ASCII key:", r.StatusCode)
	}
	// A 5xx is not final: the key is released and the retry runs again.
	if r, _ := post(t, url, "k4", "boom"); r.StatusCode != 503 {
		t.Fatal(r.StatusCode)
	}
	if r, _ := post(t, url, "k4", "boom"); r.StatusCode != 201 {
		t.Fatal("retry after 5xx:", r.StatusCode)
	}

	// A slow handler keeps its lease: retries meanwhile get 409, it runs once.
	before := runs.Load()
	var wg sync.WaitGroup
	wg.Add(1)
	var slow string
	go func() { defer wg.Done(); _, slow = post(t, url, "k5", "slow") }()
	<-slowStarted // the first request runs: every retry from now on meets it
	for range 4 {
		time.Sleep(180 * time.Millisecond)
		r, _ := post(t, url, "k5", "slow")
		if r.StatusCode != 409 || r.Header.Get("Retry-After") != "1" {
			t.Fatal("retry while the first runs:", r.StatusCode, r.Header)
		}
	}
	wg.Wait()
	if runs.Load() != before+1 || g.Stats().Renewals < 2 {
		t.Fatal("slow handler ran", runs.Load()-before, "times; renewals", g.Stats().Renewals)
	}
	if _, b := post(t, url, "k5", "slow"); b != slow {
		t.Fatal("replay", b, slow)
	}
}

func TestIdemMiddlewareRedisDown(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", freePort(t)), MaxRetries: -1, DialerRetries: 1})
	defer rdb.Close()
	g, _ := NewIdempotencyGuard(rdb, IdempotencyOptions{})
	ran := false
	ts := httptest.NewServer(g.Middleware(IdempotencyPolicy{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })))
	defer ts.Close()
	r, _ := post(t, ts.URL, "k", "a")
	if r.StatusCode != 503 || r.Header.Get("Retry-After") != "1" || ran {
		t.Fatal(r.StatusCode, ran)
	}
}
