package hotkeyd

//go:generate sh -c "cp ../../spec/lua/idempotency_*.lua lua/"

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The idempotency guard runs an operation once per key, across processes, hosts and
// languages. Each transition is one of the shared scripts in spec/lua/idempotency_*.lua,
// and records are the same Redis hashes every hotkeyd client writes: a key begun by the
// Java client can be completed here and replayed by the Python or Node one.

var (
	scriptIdemBegin    = luaScript("idempotency_begin.lua")
	scriptIdemComplete = luaScript("idempotency_complete.lua")
	scriptIdemExtend   = luaScript("idempotency_extend.lua")
	scriptIdemRelease  = luaScript("idempotency_release.lua")
)

var (
	// ErrLeaseLost: complete, fail, extend or release was refused by the fencing token
	// (the lease was taken over, the record expired or is already final). The result
	// was NOT stored. Test with errors.Is; the error is a *LeaseLostError.
	ErrLeaseLost = errors.New("hotkeyd: idempotency lease lost")
	// ErrIdempotencyUnavailable: Redis failed and the guard fails closed; nothing ran.
	ErrIdempotencyUnavailable = errors.New("hotkeyd: idempotency guard unavailable")
	// ErrIdempotencyKey: the key is empty, too long or not printable ASCII.
	ErrIdempotencyKey = errors.New("hotkeyd: bad idempotency key")
)

// LeaseLostError says why a fenced call was refused.
type LeaseLostError struct {
	Op, Key string
	Token   int64
	Reason  string // "gone", "fenced" or "final"
}

func (e *LeaseLostError) Error() string {
	detail := map[string]string{
		"gone":   "the record expired or was released (lease/TTL too short?)",
		"fenced": "another holder took over after the lease ran out",
		"final":  "the record is already final",
	}[e.Reason]
	if detail == "" {
		detail = e.Reason
	}
	return fmt.Sprintf("hotkeyd: %s refused for idempotency key %q (token %d): %s", e.Op, e.Key, e.Token, detail)
}

func (e *LeaseLostError) Unwrap() error { return ErrLeaseLost }

// Outcome is what Begin answers.
type Outcome int

const (
	// New: run the operation; you hold the lease.
	New Outcome = iota
	// InProgress: another caller holds the lease (see BeginResult.RetryAfter).
	InProgress
	// Done: it finished before; replay BeginResult.Result as is.
	Done
	// Mismatch: the key was used with another fingerprint (a client bug, HTTP 422).
	Mismatch
)

func (o Outcome) String() string {
	return [...]string{"new", "in_progress", "done", "mismatch"}[o]
}

// Lease is the right to run one operation, proven by its fencing token. Pass Token on to
// downstream writes (UPDATE ... WHERE fence < :token) so they can refuse a stale holder.
// Guarded is false only when the guard failed open: nothing in Redis protects this run.
type Lease struct {
	Key         string
	Record      string
	Token       int64
	Fingerprint string
	Guarded     bool
}

// BeginResult is the answer of Begin.
type BeginResult struct {
	Outcome    Outcome
	Lease      *Lease        // set when Outcome is New
	Result     []byte        // the stored result when Outcome is Done
	Failed     bool          // the stored result is a recorded failure (Fail)
	RetryAfter time.Duration // until the holder's lease runs out (InProgress)
	Takeover   bool          // New because an earlier holder's lease ran out
}

// IdempotencyOptions configures an IdempotencyGuard; zero values take the defaults.
type IdempotencyOptions struct {
	// Lease is how long a PROCESSING record belongs to its holder before another caller
	// may take over (default 30 s): longer than the operation's p99.9, or renewed with
	// KeepAlive.
	Lease time.Duration
	// TTL is how long a record lives to be replayed (default 24 h; at least Lease).
	TTL time.Duration
	// Namespace names the records (<prefix>:idem:<digest>) and the audit stream.
	Namespace Namespace
	// Scope separates key spaces (per service or route).
	Scope string
	// AuditMaxLen caps the audit stream <prefix>:idem-audit (default 10000; -1: no audit,
	// needed on Redis Cluster where the stream and the records are in different slots).
	AuditMaxLen int
	// MaxKeyLength is the longest key accepted (default 1024 characters).
	MaxKeyLength int
	// FailOpen runs the operation unguarded when Redis fails (duplicates possible);
	// the default fails closed with ErrIdempotencyUnavailable.
	FailOpen bool
	// OnError, if set, hears every tolerated or returned Redis failure (for logs, metrics).
	OnError func(op string, err error)
	// Store, if set, keeps every final result durably too (see IdempotencyStore): a result
	// Redis forgot is replayed from it, and a result whose record Redis lost is still
	// written there, its unique key fencing a second completion.
	Store IdempotencyStore
}

// IdempotencyStats counts a guard's answers and troubles.
type IdempotencyStats struct {
	New, InProgress, Done, Mismatch, Takeovers, LeaseLost, BadInput, Unavailable, Renewals int64
	StoreReplays, Duplicates                                                               int64
}

// IdempotencyGuard is the idempotency guard over a go-redis client. Safe for concurrent use.
type IdempotencyGuard struct {
	rdb   redis.Scripter
	opt   IdempotencyOptions
	audit string
	stats struct {
		new, inProgress, done, mismatch, takeovers, leaseLost, badInput, unavailable, renewals atomic.Int64
		storeReplays, duplicates                                                               atomic.Int64
	}
}

// NewIdempotencyGuard checks opt and returns a guard over rdb (a *redis.Client,
// *redis.ClusterClient or any redis.UniversalClient).
func NewIdempotencyGuard(rdb redis.Scripter, opt IdempotencyOptions) (*IdempotencyGuard, error) {
	if opt.Lease == 0 {
		opt.Lease = 30 * time.Second
	}
	if opt.TTL == 0 {
		opt.TTL = 24 * time.Hour
	}
	if opt.AuditMaxLen == 0 {
		opt.AuditMaxLen = 10000
	}
	if opt.MaxKeyLength == 0 {
		opt.MaxKeyLength = 1024
	}
	if opt.Lease < time.Millisecond || opt.Lease > 365*24*time.Hour {
		return nil, fmt.Errorf("hotkeyd: lease must be 1 ms .. 1 year, got %v", opt.Lease)
	}
	if opt.TTL < opt.Lease {
		return nil, fmt.Errorf("hotkeyd: ttl (%v) must be >= lease (%v): a record must outlive its lease, or a slow holder's retry runs twice", opt.TTL, opt.Lease)
	}
	if opt.AuditMaxLen < -1 {
		return nil, fmt.Errorf("hotkeyd: AuditMaxLen must be >= -1, got %d", opt.AuditMaxLen)
	}
	if _, cluster := rdb.(*redis.ClusterClient); cluster && opt.AuditMaxLen > 0 {
		return nil, errors.New("hotkeyd: on Redis Cluster the audit stream and the records live in different slots: pass AuditMaxLen: -1 (records alone work on a cluster)")
	}
	g := &IdempotencyGuard{rdb: rdb, opt: opt}
	if opt.AuditMaxLen > 0 {
		g.audit = opt.Namespace.IdempotencyAudit()
	}
	return g, nil
}

// IdempotencyRecord is the record of one key digest: <prefix>:idem:<digest>.
func (n Namespace) IdempotencyRecord(digest string) string { return n.prefix() + ":idem:" + digest }

// IdempotencyAudit is the capped stream of the guard's transitions.
func (n Namespace) IdempotencyAudit() string { return n.prefix() + ":idem-audit" }

// ResumeLease is a lease handed over from another process or language (a job queue, a
// worker): its key and fencing token. The scripts check the token, so a stale hand-over
// is refused with ErrLeaseLost.
func (g *IdempotencyGuard) ResumeLease(key string, token int64) *Lease {
	return &Lease{Key: key, Record: g.opt.Namespace.IdempotencyRecord(RecordDigest(g.opt.Scope, key)), Token: token, Guarded: true}
}

// Options returns the guard's settings, defaults filled in.
func (g *IdempotencyGuard) Options() IdempotencyOptions { return g.opt }

// Stats returns the guard's counters.
func (g *IdempotencyGuard) Stats() IdempotencyStats {
	s := &g.stats
	return IdempotencyStats{s.new.Load(), s.inProgress.Load(), s.done.Load(), s.mismatch.Load(),
		s.takeovers.Load(), s.leaseLost.Load(), s.badInput.Load(), s.unavailable.Load(), s.renewals.Load(),
		s.storeReplays.Load(), s.duplicates.Load()}
}

func (g *IdempotencyGuard) keys(record string) []string {
	if g.audit == "" {
		return []string{record}
	}
	return []string{record, g.audit}
}

func (g *IdempotencyGuard) maxlen() int {
	if g.opt.AuditMaxLen < 0 {
		return 0
	}
	return g.opt.AuditMaxLen
}

func ms(d time.Duration) int64 { return max(1, d.Milliseconds()) }

// Begin starts the operation of key, or says why not. fingerprint identifies the request
// (e.g. its body): a retry must send the same; another one is a Mismatch.
//
// Errors: ErrIdempotencyKey (bad key); ErrIdempotencyUnavailable (Redis failed, closed).
// Failing open, a Redis failure answers New with an unguarded lease.
func (g *IdempotencyGuard) Begin(ctx context.Context, key string, fingerprint []byte) (BeginResult, error) {
	if err := CheckIdempotencyKey(key, g.opt.MaxKeyLength); err != nil {
		g.stats.badInput.Add(1)
		return BeginResult{}, err
	}
	fp := IdempotencyFingerprint(fingerprint)
	record := g.opt.Namespace.IdempotencyRecord(RecordDigest(g.opt.Scope, key))
	args := []any{fp, ms(g.opt.Lease), ms(g.opt.TTL), key, g.maxlen(), ""}
	reply, err := scriptIdemBegin.Run(ctx, g.rdb, g.keys(record), args...).Slice()
	if err != nil {
		if err := g.tolerate(err, "begin"); err != nil {
			return BeginResult{}, err
		}
		g.stats.new.Add(1)
		return BeginResult{Outcome: New, Lease: &Lease{Key: key, Record: record, Fingerprint: fp}}, nil
	}
	b, err := parseBegin(reply, key, record, fp)
	if err != nil {
		return BeginResult{}, err
	}
	if b.Outcome == New && g.opt.Store != nil {
		if b, err = g.fromStore(ctx, b); err != nil {
			return BeginResult{}, err
		}
	}
	switch b.Outcome {
	case New:
		g.stats.new.Add(1)
		if b.Takeover {
			g.stats.takeovers.Add(1)
		}
	case InProgress:
		g.stats.inProgress.Add(1)
	case Done:
		g.stats.done.Add(1)
	case Mismatch:
		g.stats.mismatch.Add(1)
	}
	return b, nil
}

// Peek returns the final result stored for key and the same fingerprint, read only (one
// HMGET), or nil when there is none (no record, still running, another request): unlike
// Begin it never takes a lease. The HTTP middleware reads records of the old unscoped key
// space with it during the transition window. It needs a client with HMGET (a
// *redis.Client, *redis.ClusterClient or redis.UniversalClient); with another Scripter it
// finds nothing.
func (g *IdempotencyGuard) Peek(ctx context.Context, key string, fingerprint []byte) (*BeginResult, error) {
	if err := CheckIdempotencyKey(key, g.opt.MaxKeyLength); err != nil {
		g.stats.badInput.Add(1)
		return nil, err
	}
	h, ok := g.rdb.(interface {
		HMGet(ctx context.Context, key string, fields ...string) *redis.SliceCmd
	})
	if !ok {
		return nil, nil
	}
	record := g.opt.Namespace.IdempotencyRecord(RecordDigest(g.opt.Scope, key))
	reply, err := h.HMGet(ctx, record, "st", "fp", "res").Result()
	if err != nil {
		return nil, g.tolerate(err, "peek")
	}
	st, fp := str(reply[0]), reply[1]
	if (st != "D" && st != "F") || fp == nil || str(fp) != IdempotencyFingerprint(fingerprint) {
		return nil, nil
	}
	var res []byte
	if reply[2] != nil {
		res = []byte(str(reply[2]))
	}
	return &BeginResult{Outcome: Done, Result: res, Failed: st == "F"}, nil
}

func str(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case int64:
		return strconv.FormatInt(x, 10)
	}
	return fmt.Sprint(v)
}

func parseBegin(r []any, key, record, fp string) (BeginResult, error) {
	bad := fmt.Errorf("hotkeyd: unexpected reply from the begin script: %v", r)
	if len(r) < 2 {
		return BeginResult{}, bad
	}
	switch str(r[0]) {
	case "new":
		tok, err := strconv.ParseInt(str(r[1]), 10, 64)
		if err != nil || len(r) < 4 {
			return BeginResult{}, bad
		}
		return BeginResult{Outcome: New, Takeover: str(r[2]) == "takeover",
			Lease: &Lease{Key: key, Record: record, Token: tok, Fingerprint: fp, Guarded: true}}, nil
	case "busy":
		left, _ := r[2].(int64)
		return BeginResult{Outcome: InProgress, RetryAfter: max(time.Millisecond, time.Duration(left)*time.Millisecond)}, nil
	case "done", "failed":
		var res []byte
		if len(r) > 2 && r[2] != nil {
			res = []byte(str(r[2]))
		}
		return BeginResult{Outcome: Done, Result: res, Failed: str(r[0]) == "failed"}, nil
	case "mismatch":
		return BeginResult{Outcome: Mismatch}, nil
	}
	return BeginResult{}, bad
}

// tolerate counts a Redis failure; it returns the error to give back (closed) or nil (open).
func (g *IdempotencyGuard) tolerate(err error, op string) error {
	g.stats.unavailable.Add(1)
	if g.opt.OnError != nil {
		g.opt.OnError(op, err)
	}
	if g.opt.FailOpen {
		return nil
	}
	return fmt.Errorf("%w (%s): %w", ErrIdempotencyUnavailable, op, err)
}

// fromStore: Redis had no record (a New); did it forget a final result the store has?
func (g *IdempotencyGuard) fromStore(ctx context.Context, b BeginResult) (BeginResult, error) {
	l := b.Lease
	stored, err := g.opt.Store.Get(ctx, RecordDigest(g.opt.Scope, l.Key))
	if err != nil {
		if !g.opt.FailOpen {
			g.Abandon(context.WithoutCancel(ctx), l)
		}
		return b, g.tolerate(err, "store lookup") // failing open: Redis still guards the key
	}
	if stored == nil {
		return b, nil
	}
	g.stats.storeReplays.Add(1)
	if stored.Fingerprint != l.Fingerprint {
		g.Abandon(context.WithoutCancel(ctx), l)
		return BeginResult{Outcome: Mismatch}, nil
	}
	st := "D"
	if stored.Failed {
		st = "F"
	}
	_ = g.writeRedis(ctx, l, stored.Result, st, false) // Redis learns it again
	return BeginResult{Outcome: Done, Result: stored.Result, Failed: stored.Failed}, nil
}

// Complete stores result (DONE) and ends the lease. ErrLeaseLost: the lease was taken
// over, or the record is gone and there is no Store; the result is not stored. With a
// Store, a result whose record Redis forgot is written to the store anyway (its unique
// key is then the fence), and ErrDuplicateCompletion says the store holds another
// completion of the key (the operation ran twice).
func (g *IdempotencyGuard) Complete(ctx context.Context, l *Lease, result []byte) error {
	return g.finish(ctx, l, result, "D")
}

// Fail records a final failure that retries see too (e.g. payment declined).
func (g *IdempotencyGuard) Fail(ctx context.Context, l *Lease, result []byte) error {
	return g.finish(ctx, l, result, "F")
}

func (g *IdempotencyGuard) finish(ctx context.Context, l *Lease, result []byte, st string) error {
	if result == nil {
		result = []byte{}
	}
	if !l.Guarded { // failed open: nothing to fence with
		return nil
	}
	err := g.writeRedis(ctx, l, result, st, false)
	var lost *LeaseLostError
	if g.opt.Store == nil || (err != nil && !(errors.As(err, &lost) && lost.Reason == "gone")) {
		return err // a record taken over by another holder stays refused: that one completes
	}
	mine := StoredFinal{Digest: RecordDigest(g.opt.Scope, l.Key), Key: l.Key, Fingerprint: l.Fingerprint,
		Failed: st == "F", Token: l.Token, Result: result}
	winner, err := g.opt.Store.Put(ctx, mine)
	if err != nil {
		return g.tolerate(err, "store write")
	}
	if winner.Token != l.Token {
		wst := "D"
		if winner.Failed {
			wst = "F"
		}
		_ = g.writeRedis(ctx, l, winner.Result, wst, true) // gone: Begin reads the store
		g.stats.duplicates.Add(1)
		return &DuplicateCompletionError{Key: l.Key, Stored: winner.Result, Failed: winner.Failed}
	}
	return nil
}

func (g *IdempotencyGuard) writeRedis(ctx context.Context, l *Lease, result []byte, st string, repair bool) error {
	flag := ""
	if repair {
		flag = "repair"
	}
	args := []any{l.Token, st, result, ms(g.opt.TTL), g.maxlen(), flag}
	return g.fenced(ctx, scriptIdemComplete, "complete", l, g.keys(l.Record), args)
}

// Extend renews the lease for d (0: the configured lease) from now.
func (g *IdempotencyGuard) Extend(ctx context.Context, l *Lease, d time.Duration) error {
	if d <= 0 {
		d = g.opt.Lease
	}
	return g.fenced(ctx, scriptIdemExtend, "extend", l, []string{l.Record}, []any{l.Token, ms(d)})
}

// Release gives the key back (PROCESSING -> NEW): the next caller runs the operation.
// For failures worth retrying (a downstream timeout, a 5xx).
func (g *IdempotencyGuard) Release(ctx context.Context, l *Lease) error {
	return g.fenced(ctx, scriptIdemRelease, "release", l, g.keys(l.Record), []any{l.Token, g.maxlen()})
}

// Abandon releases, ignoring a lost lease or an outage (the lease runs out anyway).
func (g *IdempotencyGuard) Abandon(ctx context.Context, l *Lease) { _ = g.Release(ctx, l) }

func (g *IdempotencyGuard) fenced(ctx context.Context, s *redis.Script, op string, l *Lease, keys []string, args []any) error {
	if !l.Guarded { // failed open: nothing in Redis to update
		return nil
	}
	reply, err := s.Run(ctx, g.rdb, keys, args...).Slice()
	if err != nil {
		return g.tolerate(err, op)
	}
	if len(reply) > 0 && str(reply[0]) == "ok" {
		return nil
	}
	g.stats.leaseLost.Add(1)
	why := ""
	if len(reply) > 1 {
		why = str(reply[1])
	}
	return &LeaseLostError{Op: op, Key: l.Key, Token: l.Token, Reason: why}
}

// KeepAlive renews a lease in the background while a long operation runs. Lost is
// closed when a renewal was refused (the lease was taken over): stop working, Complete
// will be refused. A Redis failure is retried at the next beat.
type KeepAlive struct {
	lost   chan struct{}
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
	err    atomic.Value
	Beats  atomic.Int64
	cancel context.CancelFunc
}

// KeepAlive starts renewing l every `every` (0: a third of the lease) until Stop. The
// returned context is cancelled when the lease is lost or Stop is called, so work that
// honours ctx stops when another caller took over.
func (g *IdempotencyGuard) KeepAlive(ctx context.Context, l *Lease, every time.Duration) (context.Context, *KeepAlive) {
	if every <= 0 || every >= g.opt.Lease {
		every = g.opt.Lease / 3
	}
	wctx, cancel := context.WithCancel(ctx)
	ka := &KeepAlive{lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{}), cancel: cancel}
	if !l.Guarded {
		close(ka.done)
		return wctx, ka
	}
	go func() {
		defer close(ka.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ka.stop:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
			// The renewal must not die with the caller's context mid-write: bound it by
			// one lease instead.
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), g.opt.Lease)
			err := g.Extend(rctx, l, 0)
			rcancel()
			var lost *LeaseLostError
			switch {
			case errors.As(err, &lost):
				ka.err.Store(err)
				cancel() // before Lost closes: whoever sees Lost sees the context done
				close(ka.lost)
				return
			case err == nil:
				if l.Guarded {
					ka.Beats.Add(1)
					g.stats.renewals.Add(1)
				}
			}
		}
	}()
	return wctx, ka
}

// Lost is closed when the lease was lost.
func (ka *KeepAlive) Lost() <-chan struct{} { return ka.lost }

// Err is the LeaseLostError that ended the renewals, or nil.
func (ka *KeepAlive) Err() error {
	if e, ok := ka.err.Load().(error); ok {
		return e
	}
	return nil
}

// Stop ends the renewals and waits for the renewing goroutine to exit.
func (ka *KeepAlive) Stop() {
	ka.once.Do(func() { close(ka.stop) })
	<-ka.done
	ka.cancel()
}
