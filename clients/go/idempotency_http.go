package hotkeyd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// IdempotencyPolicy says which requests the HTTP middleware guards, and how. It follows
// the IETF draft "The Idempotency-Key HTTP Header Field", with the same answers as the
// Python, Java and Node middleware (docs/idempotency.md, "HTTP"):
//
//	first request with a key           the handler's response (stored when final)
//	retry after it finished            the stored response + Idempotent-Replayed: true
//	retry while the first still runs   409 Conflict, Retry-After
//	same key, other request            422 Unprocessable Content
//	bad, repeated or (if Required) missing key   400; body over MaxBody: 413
//	Redis down, failing closed         503 Service Unavailable, Retry-After
//
// A 5xx, 408, 425 or 429 (or a panic) releases the key: the client's retry runs again.
// Errors are RFC 9457 problems (application/problem+json) whose type links the docs. A
// 409's Retry-After is the lower of the holder's remaining lease and the running median
// of the route's handler time, in whole seconds, at least 1.
type IdempotencyPolicy struct {
	// Methods guarded when they carry the header (default POST, PATCH, PUT, DELETE).
	Methods []string
	// Required, if set, says which requests must carry a key (400 without one).
	Required func(*http.Request) bool
	// User names the caller (an authenticated user or tenant id): keys are separate
	// per caller, so one caller cannot replay another's response. Nil: the digest of
	// the Authorization header names the caller (requests without one share one
	// anonymous space). The scoped key is the same in every language
	// (spec/vectors/idempotency.json, "scopes").
	User func(*http.Request) string
	// Shared puts every caller in one key space (the old default): a key sent by two
	// callers is one operation. Only for keys meant to be shared.
	Shared bool
	// NoLegacyLookup ends the transition window after the upgrade from the unscoped
	// default. In the window (the default, with User nil), a first request also looks
	// up its key in the old unscoped space (one HMGET) and replays a final record of
	// the same request found there. Set it once the guard's TTL has passed since the
	// upgrade.
	NoLegacyLookup bool
	// Header carrying the key (default "Idempotency-Key").
	Header string
	// MaxBody is the largest request body accepted on a guarded request (default 1 MiB).
	MaxBody int64
}

// ReplayedHeader marks a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// IdempotencyProblemType is the type of the middleware's problem responses: the docs'
// section (the same in every language).
const IdempotencyProblemType = "docs/idempotency.md#http-idempotency-key-middleware"

// IdempotencyCaller is the scope of a request's keys: "a" and the digest of its
// Authorization header, or with a User function "u" and the digest of the user.
func IdempotencyCaller(authorization string, user *string) string {
	if user != nil {
		return "u" + IdempotencyFingerprint([]byte(*user))
	}
	return "a" + IdempotencyFingerprint([]byte(authorization))
}

type leaseCtxKey struct{}

// IdempotencyLeaseFrom returns the lease of a guarded request (for its fencing token).
func IdempotencyLeaseFrom(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseCtxKey{}).(*Lease)
	return l, ok
}

// Middleware returns net/http middleware guarding requests that carry an Idempotency-Key.
// The lease is renewed in the background while the handler runs (every third of the
// lease) and the renewal stops when it returns; the handler's context is cancelled if
// the lease is lost to another caller.
func (g *IdempotencyGuard) Middleware(p IdempotencyPolicy) func(http.Handler) http.Handler {
	if p.Header == "" {
		p.Header = "Idempotency-Key"
	}
	if p.MaxBody == 0 {
		p.MaxBody = 1 << 20
	}
	times := &handlerTimes{} // for 409's Retry-After
	methods := map[string]bool{}
	if p.Methods == nil {
		p.Methods = []string{"POST", "PATCH", "PUT", "DELETE"}
	}
	for _, m := range p.Methods {
		methods[strings.ToUpper(m)] = true
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !methods[strings.ToUpper(r.Method)] {
				next.ServeHTTP(w, r)
				return
			}
			raw := r.Header.Values(p.Header)
			if len(raw) == 0 {
				if p.Required != nil && p.Required(r) {
					writeResponse(w, errorResponse(http.StatusBadRequest, "this route needs "+p.Header, -1))
					return
				}
				next.ServeHTTP(w, r)
				return
			}
			if len(raw) > 1 || severalKeys(raw[0]) {
				writeResponse(w, errorResponse(http.StatusBadRequest, "send one "+p.Header+" header, not several", -1))
				return
			}
			key := unquote(raw[0])
			if err := CheckIdempotencyKey(key, MaxIdempotencyKeyHeader); err != nil {
				writeResponse(w, errorResponse(http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrIdempotencyKey.Error()+": "), -1))
				return
			}
			legacy := ""
			switch {
			case p.Shared:
			case p.User != nil:
				u := p.User(r)
				key = IdempotencyCaller("", &u) + ":" + key
			default:
				if !p.NoLegacyLookup {
					legacy = key
				}
				key = IdempotencyCaller(r.Header.Get("Authorization"), nil) + ":" + key
			}
			body, err := io.ReadAll(io.LimitReader(r.Body, p.MaxBody+1))
			if err != nil {
				writeResponse(w, errorResponse(http.StatusBadRequest, "could not read the request body", -1))
				return
			}
			if int64(len(body)) > p.MaxBody {
				writeResponse(w, errorResponse(http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", p.MaxBody), -1))
				return
			}
			fp := []byte(IdempotencyFingerprint([]byte(strings.ToUpper(r.Method)), []byte(r.URL.Path), []byte(r.URL.RawQuery), body))
			b, err := g.Begin(r.Context(), key, fp)
			if err != nil {
				if errors.Is(err, ErrIdempotencyKey) {
					writeResponse(w, errorResponse(http.StatusBadRequest, err.Error(), -1))
				} else {
					writeResponse(w, errorResponse(http.StatusServiceUnavailable, "idempotency check unavailable, retry later", 1))
				}
				return
			}
			if b.Outcome != New {
				writeResponse(w, refusal(b, times.median(r.URL.Path)))
				return
			}
			if legacy != "" && !b.Takeover {
				old, err := g.Peek(r.Context(), legacy, fp)
				if err != nil {
					g.Abandon(context.WithoutCancel(r.Context()), b.Lease)
					writeResponse(w, errorResponse(http.StatusServiceUnavailable, "idempotency check unavailable, retry later", 1))
					return
				}
				if old != nil { // written before per-caller scopes: still replayed
					g.Abandon(context.WithoutCancel(r.Context()), b.Lease)
					writeResponse(w, refusal(*old, -1))
					return
				}
			}
			started := time.Now()
			g.run(w, r, next, b.Lease, body, func() { times.add(r.URL.Path, time.Since(started)) })
		})
	}
}

// severalKeys: a comma outside a quoted string is two field lines combined, or a list;
// refused, or one of them would silently win.
func severalKeys(raw string) bool {
	quoted := false
	for _, c := range raw {
		switch {
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			return true
		}
	}
	return false
}

// handlerTimes keeps a running median of each route's handler time (the last 51 runs),
// for 409's Retry-After.
type handlerTimes struct {
	mu     sync.Mutex
	byPath map[string][]time.Duration
}

const handlerTimesWindow = 51

func (t *handlerTimes) add(path string, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPath == nil {
		t.byPath = map[string][]time.Duration{}
	}
	s := append(t.byPath[path], d)
	if len(s) > handlerTimesWindow {
		s = s[len(s)-handlerTimesWindow:]
	}
	t.byPath[path] = s
}

// median in seconds, or -1 with no run yet.
func (t *handlerTimes) median(path string) float64 {
	t.mu.Lock()
	s := append([]time.Duration(nil), t.byPath[path]...)
	t.mu.Unlock()
	if len(s) == 0 {
		return -1
	}
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	n := len(s)
	if n%2 == 1 {
		return s[n/2].Seconds()
	}
	return (s[n/2-1] + s[n/2]).Seconds() / 2
}

func (g *IdempotencyGuard) run(w http.ResponseWriter, r *http.Request, next http.Handler, l *Lease, body []byte, timed func()) {
	ctx, ka := g.KeepAlive(context.WithValue(r.Context(), leaseCtxKey{}, l), l, 0)
	r2 := r.WithContext(ctx)
	r2.Body = io.NopCloser(bytes.NewReader(body))
	r2.ContentLength = int64(len(body))
	rec := &recorder{header: http.Header{}}
	ended := false
	defer func() {
		ka.Stop()
		if !ended { // the handler panicked: a retry runs it again
			g.Abandon(context.WithoutCancel(r.Context()), l)
		}
	}()
	next.ServeHTTP(rec, r2)
	ended = true
	timed()
	ka.Stop()
	resp := rec.response()
	bg := context.WithoutCancel(r.Context()) // the outcome is recorded even if the client left
	if !isFinal(resp.Status) {
		g.Abandon(bg, l)
	} else if err := g.Complete(bg, l, encodeResponse(resp)); err != nil {
		kind := "IdempotencyUnavailable"
		if errors.Is(err, ErrLeaseLost) {
			kind = "LeaseLostError"
		} else if errors.Is(err, ErrDuplicateCompletion) {
			kind = "DuplicateCompletionError"
		}
		resp.Headers = append(resp.Headers, [2]string{"Idempotency-Warning", "not recorded: " + kind})
	}
	writeResponse(w, resp)
}

func isFinal(status int) bool {
	return status < 500 && status != 408 && status != 425 && status != 429
}

func quoted(s string) bool {
	s = strings.TrimSpace(s)
	return len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"'
}

// unquote: the draft makes the key a Structured Field string ("..."); bare tokens pass.
func unquote(s string) string {
	s = strings.TrimSpace(s)
	if quoted(s) {
		return s[1 : len(s)-1]
	}
	return s
}

// storedResponse is what is stored and replayed: status, headers, body.
type storedResponse struct {
	Status  int
	Headers [][2]string
	Body    []byte
}

// encodeResponse: status and headers as one JSON line, then the body bytes as they were
// (the format every hotkeyd middleware stores, so any language replays it).
func encodeResponse(r storedResponse) []byte {
	head, _ := json.Marshal(struct {
		S int         `json:"s"`
		H [][2]string `json:"h"`
	}{r.Status, r.Headers})
	return append(append(head, '\n'), r.Body...)
}

func decodeResponse(raw []byte) (storedResponse, error) {
	head, body, _ := bytes.Cut(raw, []byte{'\n'})
	var obj struct {
		S int        `json:"s"`
		H [][]string `json:"h"`
	}
	if err := json.Unmarshal(head, &obj); err != nil {
		return storedResponse{}, err
	}
	r := storedResponse{Status: obj.S, Body: body}
	for _, kv := range obj.H {
		if len(kv) == 2 {
			r.Headers = append(r.Headers, [2]string{kv[0], kv[1]})
		}
	}
	return r, nil
}

// refusal answers a begin that is not New. expected: the route's median handler time in
// seconds (< 0: none yet); a 409 says to retry after the lower of it and the lease left.
func refusal(b BeginResult, expected float64) storedResponse {
	switch b.Outcome {
	case Done:
		r, err := decodeResponse(b.Result)
		if err != nil {
			return errorResponse(http.StatusInternalServerError, "the stored response is not readable", -1)
		}
		r.Headers = append(r.Headers, [2]string{ReplayedHeader, "true"})
		return r
	case InProgress:
		wait := b.RetryAfter.Seconds()
		if expected >= 0 && expected < wait {
			wait = expected
		}
		return errorResponse(http.StatusConflict, "a request with this Idempotency-Key is still being processed", wait)
	}
	return errorResponse(http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request")
}

// problemTitles are the titles of the middleware's problems (RFC 9110's names, as every language).
var problemTitles = map[int]string{
	400: "Bad Request", 409: "Conflict", 413: "Content Too Large",
	422: "Unprocessable Content", 500: "Internal Server Error", 503: "Service Unavailable",
}

// errorResponse: an RFC 9457 problem whose type links the docs; retryAfter < 0 sends no
// Retry-After.
func errorResponse(status int, msg string, retryAfter ...float64) storedResponse {
	title, ok := problemTitles[status]
	if !ok {
		title = "Error"
	}
	body, _ := json.Marshal(struct {
		Type   string `json:"type"`
		Title  string `json:"title"`
		Status int    `json:"status"`
		Detail string `json:"detail"`
	}{IdempotencyProblemType, title, status, msg})
	h := [][2]string{{"content-type", "application/problem+json"}, {"content-length", strconv.Itoa(len(body))}}
	if len(retryAfter) > 0 && retryAfter[0] >= 0 {
		h = append(h, [2]string{"retry-after", strconv.Itoa(max(1, int(math.Ceil(retryAfter[0]))))})
	}
	return storedResponse{Status: status, Headers: h, Body: body}
}

func writeResponse(w http.ResponseWriter, r storedResponse) {
	h := w.Header()
	for _, kv := range r.Headers {
		h.Add(kv[0], kv[1])
	}
	w.WriteHeader(r.Status)
	_, _ = w.Write(r.Body)
}

// recorder buffers a guarded handler's response, to store it whole.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (c *recorder) Header() http.Header { return c.header }

func (c *recorder) WriteHeader(status int) {
	if c.status == 0 {
		c.status = status
	}
}

func (c *recorder) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	return c.body.Write(b)
}

func (c *recorder) response() storedResponse {
	status := c.status
	if status == 0 {
		status = http.StatusOK
	}
	names := make([]string, 0, len(c.header))
	for k := range c.header {
		names = append(names, k)
	}
	sort.Strings(names)
	var h [][2]string
	for _, k := range names {
		for _, v := range c.header[k] {
			h = append(h, [2]string{strings.ToLower(k), v})
		}
	}
	if c.header.Get("Content-Type") == "" && c.body.Len() > 0 {
		h = append(h, [2]string{"content-type", http.DetectContentType(c.body.Bytes())})
	}
	return storedResponse{Status: status, Headers: h, Body: c.body.Bytes()}
}
