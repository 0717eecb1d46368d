package hotkeyd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
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

// TestIdemHTTPVectors: the caller scopes, problem bodies and Retry-After of
// spec/vectors/idempotency.json ("http"), the same in every language.
func TestIdemHTTPVectors(t *testing.T) {
	v, _ := loadIdemVectors(t)
	for _, s := range v.HTTP.Scopes {
		auth := ""
		if s.Authorization != nil {
			auth = *s.Authorization
		}
		scoped := IdempotencyCaller(auth, s.User) + ":" + s.Key
		if scoped != s.ScopedKey || (Namespace{}).IdempotencyRecord(RecordDigest("", scoped)) != s.Record {
			t.Errorf("scope of %+v: %s", s, scoped)
		}
	}
	for _, p := range v.HTTP.Problems {
		r := errorResponse(p.Status, p.Detail, -1)
		var got map[string]any
		if err := json.Unmarshal(r.Body, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]any{"type": v.HTTP.ProblemType, "title": p.Title, "status": float64(p.Status), "detail": p.Detail}
		if !reflect.DeepEqual(got, want) || r.Headers[0] != [2]string{"content-type", v.HTTP.ContentType} {
			t.Errorf("problem %d: %v %v", p.Status, got, r.Headers)
		}
	}
	for _, c := range v.HTTP.RetryAfter {
		median := -1.0
		if c.MedianMs != nil {
			median = *c.MedianMs / 1000
		}
		r := refusal(BeginResult{Outcome: InProgress, RetryAfter: time.Duration(c.LeaseLeftMs) * time.Millisecond}, median)
		if got := r.Headers[len(r.Headers)-1]; got != [2]string{"retry-after", c.RetryAfter} {
			t.Errorf("retry-after of %+v: %v", c, got)
		}
	}
}

// TestIdemMiddlewareCallerScope: by default the Authorization header scopes keys (Bob
// reusing Alice's key runs his own order), records of the unscoped default still replay
// (the transition window), errors are problems, a comma-joined key is refused, and a
// 409's Retry-After follows the route's median handler time, not the 10 s lease.
func TestIdemMiddlewareCallerScope(t *testing.T) {
	srv := startRedis(t)
	g, _ := NewIdempotencyGuard(srv.Client(t), IdempotencyOptions{Lease: 10 * time.Second, TTL: time.Minute})
	var runs atomic.Int64
	slowStarted := make(chan struct{}, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := runs.Add(1)
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), "slow") {
			slowStarted <- struct{}{}
			time.Sleep(600 * time.Millisecond)
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d}`, n)
	})
	ts := httptest.NewServer(g.Middleware(IdempotencyPolicy{})(h))
	defer ts.Close()
	shared := httptest.NewServer(g.Middleware(IdempotencyPolicy{Shared: true})(h))
	defer shared.Close()
	url := ts.URL + "/order"
	alice, bob := []string{"Authorization", "Bearer alice"}, []string{"Authorization", "Bearer bob"}

	_, a1 := post(t, url, "k1", "a", alice...)
	r2, a2 := post(t, url, "k1", "a", alice...)
	if a2 != a1 || r2.Header.Get(ReplayedHeader) != "true" {
		t.Fatal("alice's retry:", a1, a2)
	}
	if _, b := post(t, url, "k1", "a", bob...); b == a1 {
		t.Fatal("bob got alice's response:", b)
	}
	if _, anon := post(t, url, "k1", "a"); anon == a1 {
		t.Fatal("no Authorization got alice's response:", anon)
	}
	_, s1 := post(t, shared.URL+"/order", "k2", "a", alice...)
	if _, s2 := post(t, shared.URL+"/order", "k2", "a", bob...); s2 != s1 {
		t.Fatal("a shared key space replays for everybody:", s1, s2)
	}

	// A record of the unscoped default (written before the upgrade) still replays.
	ctx := context.Background()
	fp := []byte(IdempotencyFingerprint([]byte("POST"), []byte("/order"), []byte(""), []byte("a")))
	old, _ := g.Begin(ctx, "legacy", fp)
	if err := g.Complete(ctx, old.Lease, encodeResponse(storedResponse{Status: 201, Body: []byte("before the upgrade")})); err != nil {
		t.Fatal(err)
	}
	before := runs.Load()
	if r, b := post(t, url, "legacy", "a", alice...); b != "before the upgrade" || r.Header.Get(ReplayedHeader) != "true" || runs.Load() != before {
		t.Fatal("legacy record:", r.StatusCode, b)
	}

	// Problems, with the same type and detail as every other middleware.
	r, body := post(t, url, "k1", "other", alice...)
	var p map[string]any
	_ = json.Unmarshal([]byte(body), &p)
	if r.StatusCode != 422 || r.Header.Get("Content-Type") != "application/problem+json" ||
		p["type"] != IdempotencyProblemType || p["detail"] != "this Idempotency-Key was used with a different request" {
		t.Fatal("422:", r.StatusCode, r.Header, body)
	}
	if r, body := post(t, url, `"k3", "k4"`, "a", alice...); r.StatusCode != 400 || !strings.Contains(body, "send one Idempotency-Key header, not several") {
		t.Fatal("comma-joined keys:", r.StatusCode, body)
	}

	// Retry-After: the median of the route's runs (0.6 s), not the 10 s lease.
	post(t, url, "k5", "slow", alice...)
	<-slowStarted
	done := make(chan struct{})
	go func() { defer close(done); post(t, url, "k6", "slow", alice...) }()
	<-slowStarted
	if r, _ := post(t, url, "k6", "slow", alice...); r.StatusCode != 409 || r.Header.Get("Retry-After") != "1" {
		t.Fatal("409 while running:", r.StatusCode, r.Header.Get("Retry-After"))
	}
	<-done
}
