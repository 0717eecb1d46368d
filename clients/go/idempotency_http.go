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
type IdempotencyPolicy struct {
	// Methods guarded when they carry the header (default POST, PATCH, PUT, DELETE).
	Methods []string
	// Required, if set, says which requests must carry a key (400 without one).
	Required func(*http.Request) bool
	// User names the caller: keys are separate per user, so one user cannot replay
	// another's response. Nil: one key space for everybody.
	User func(*http.Request) string
	// Header carrying the key (default "Idempotency-Key").
	Header string
	// MaxBody is the largest request body accepted on a guarded request (default 1 MiB).
	MaxBody int64
}

// ReplayedHeader marks a replayed response.
const ReplayedHeader = "Idempotent-Replayed"

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
			if len(raw) > 1 {
				writeResponse(w, errorResponse(http.StatusBadRequest, "more than one "+p.Header, -1))
				return
			}
			key := unquote(raw[0])
			if err := CheckIdempotencyKey(key, MaxIdempotencyKeyHeader); err != nil {
				writeResponse(w, errorResponse(http.StatusBadRequest, strings.TrimPrefix(err.Error(), ErrIdempotencyKey.Error()+": "), -1))
				return
			}
			if p.User != nil {
				key = "u" + IdempotencyFingerprint([]byte(p.User(r))) + ":" + key
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
				writeResponse(w, refusal(b))
				return
			}
			g.run(w, r, next, b.Lease, body)
		})
	}
}

func (g *IdempotencyGuard) run(w http.ResponseWriter, r *http.Request, next http.Handler, l *Lease, body []byte) {
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
	ka.Stop()
	resp := rec.response()
	bg := context.WithoutCancel(r.Context()) // the outcome is recorded even if the client left
	if !isFinal(resp.Status) {
		g.Abandon(bg, l)
	} else if err := g.Complete(bg, l, encodeResponse(resp)); err != nil {
		kind := "IdempotencyUnavailable"
		if errors.Is(err, ErrLeaseLost) {
			kind = "LeaseLostError"
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

func refusal(b BeginResult) storedResponse {
	switch b.Outcome {
	case Done:
		r, err := decodeResponse(b.Result)
		if err != nil {
			return errorResponse(http.StatusInternalServerError, "the stored response is not readable", -1)
		}
		r.Headers = append(r.Headers, [2]string{ReplayedHeader, "true"})
		return r
	case InProgress:
		return errorResponse(http.StatusConflict, "a request with this Idempotency-Key is still being processed", b.RetryAfter.Seconds())
	}
	return errorResponse(http.StatusUnprocessableEntity, "this Idempotency-Key was used with a different request")
}

// errorResponse: a small JSON error; retryAfter < 0 sends no Retry-After.
func errorResponse(status int, msg string, retryAfter ...float64) storedResponse {
	body, _ := json.Marshal(map[string]string{"error": msg})
	h := [][2]string{{"content-type", "application/json"}, {"content-length", strconv.Itoa(len(body))}}
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
