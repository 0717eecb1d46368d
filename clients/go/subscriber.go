package hotkeyd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// SubscriberStats are the counters of one subscriber.
type SubscriberStats struct {
	Messages, Applied, Stale, Gaps, Resyncs, Connects, Reconnects, BadMessages, BadEntries,
	Invalidations, Suspect, Unsigned, Refused int64
	// Lost counts subscriptions lost; each dropped every local copy (spec/failure.md).
	Lost int64
	// LastNotification is the wall time (unix ms) of the last valid notification, 0 if
	// none: a daemon that stopped shows as a growing age while its keys live out their TTL.
	LastNotification int64
}

// SubscriberOptions configure a Subscriber. Only Client is required.
type SubscriberOptions struct {
	// Client is any go-redis client: *redis.Client, *redis.ClusterClient, a Ring or a
	// failover client. The subscriber uses its own pub/sub connection, never one of
	// the app's pooled connections.
	Client redis.UniversalClient
	// SnapshotClient reads the daemon's snapshots when the daemon publishes to another
	// logical database than Client uses (an app on db 3, the daemon on db 0).
	SnapshotClient redis.UniversalClient
	Namespace      Namespace
	HotSet         HotSetOptions
	// OnInvalidate receives the keys of every invalidation broadcast; nil disables the
	// invalidation subscription.
	OnInvalidate func(origin string, keys [][]byte)
	// OnInvalidationPayload, when set, receives each invalidation's raw payload instead
	// of OnInvalidate (a HotCache checks size, signature and rate itself).
	OnInvalidationPayload func(payload []byte)
	// OnHeartbeat receives each raw message of the watch channel (the daemon's watch
	// heartbeats, docs/consistency.md); nil: not subscribed.
	OnHeartbeat func(payload []byte)
	// OnReset is called after every (re)connect: anything cached before may have
	// missed invalidations while disconnected.
	OnReset func()
	// StaleAfter: instances whose heartbeat is older are ignored at bootstrap (30 s).
	StaleAfter time.Duration
	// ResyncEvery re-reads every snapshot periodically (60 s) as a safety net.
	ResyncEvery time.Duration
	// StartTimeout bounds Start (DefaultStartTimeout, from spec/limits.json): with Redis
	// down or silent, Start returns an error wrapping ErrUnreachable and
	// context.DeadlineExceeded once it has passed. A negative value leaves the bound to
	// Start's ctx alone.
	StartTimeout time.Duration
	// MaxMessageBytes: larger messages are dropped unparsed and counted (4 MiB).
	MaxMessageBytes int
	// HealthInterval: after this long without a message the subscription sends PING, and
	// no reply within as long again means a half-open connection: reconnect (5 s).
	HealthInterval time.Duration
	// MaxClockSkew: a message whose ts is further ahead of this host's clock is suspect:
	// counted, not applied (300 s).
	MaxClockSkew time.Duration
	// Auth verifies signed messages; with it, unsigned or forged messages are dropped.
	Auth *MessageAuth
	// Sharded uses SSUBSCRIBE (Redis >= 7 sharded pub/sub), as the daemon's
	// --sharded-pubsub; PUBLISHes from the cache then go out as SPUBLISH.
	Sharded bool
	Logger  *slog.Logger
	// Now is the wall clock (unix seconds) for the clock-skew check; tests pass their own.
	Now func() float64
}

// Subscriber keeps a HotSet current from the daemon's events channel.
//
// Start-up order closes the race between snapshot and stream: subscribe first, wait
// for the confirmation, then read the snapshots; messages published meanwhile wait in
// the subscription and are applied afterwards (those already in a snapshot are stale).
// The same order runs after every reconnect.
type Subscriber struct {
	o      SubscriberOptions
	hot    *HotSet
	snaps  snapshotStore
	stats  SubscriberStats
	cancel context.CancelFunc
	done   chan struct{}
	ready  chan struct{}
	once   sync.Once
	errMu  sync.Mutex
	err    error
	last   error // the last connection error, for Start's message
}

// ErrUnreachable is wrapped by Start's error when the subscriber was not ready within
// its bound (StartTimeout or ctx): Redis down, silent, or unreachable.
var ErrUnreachable = errors.New("hotkeyd: hot-key subscriber not ready (is Redis up?)")

// NewSubscriber builds a subscriber; call Start to run it.
func NewSubscriber(o SubscriberOptions) *Subscriber {
	if o.SnapshotClient == nil {
		o.SnapshotClient = o.Client
	}
	if o.StaleAfter <= 0 {
		o.StaleAfter = staleAfter
	}
	if o.ResyncEvery <= 0 {
		o.ResyncEvery = 60 * time.Second
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = maxMessageBytes
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = 5 * time.Second
	}
	if o.MaxClockSkew <= 0 {
		o.MaxClockSkew = maxClockSkew
	}
	if o.Now == nil {
		o.Now = func() float64 { return float64(time.Now().UnixNano()) / 1e9 }
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Subscriber{o: o, hot: NewHotSet(o.HotSet), snaps: redisSnapshots{o.SnapshotClient, o.Namespace},
		done: make(chan struct{}), ready: make(chan struct{})}
}

// HotSet is the subscriber's live hot set.
func (s *Subscriber) HotSet() *HotSet { return s.hot }

// Stats returns a copy of the counters.
func (s *Subscriber) Stats() SubscriberStats {
	st := &s.stats
	return SubscriberStats{
		Messages: atomic.LoadInt64(&st.Messages), Applied: atomic.LoadInt64(&st.Applied),
		Stale: atomic.LoadInt64(&st.Stale), Gaps: atomic.LoadInt64(&st.Gaps),
		Resyncs: atomic.LoadInt64(&st.Resyncs), Connects: atomic.LoadInt64(&st.Connects),
		Reconnects: atomic.LoadInt64(&st.Reconnects), BadMessages: atomic.LoadInt64(&st.BadMessages),
		BadEntries: atomic.LoadInt64(&st.BadEntries), Invalidations: atomic.LoadInt64(&st.Invalidations),
		Suspect: atomic.LoadInt64(&st.Suspect), Unsigned: atomic.LoadInt64(&st.Unsigned),
		Refused: atomic.LoadInt64(&st.Refused), Lost: atomic.LoadInt64(&st.Lost),
		LastNotification: atomic.LoadInt64(&st.LastNotification),
	}
}

// Start connects, bootstraps from the snapshots and keeps following in a goroutine.
// It returns once the first bootstrap is done, or the first error that is not worth
// retrying (wrong password, missing ACL permission), or, when StartTimeout or ctx ends
// first, an error wrapping ErrUnreachable, ctx's error and the last connection error
// (spec/failure.md, start_redis_down). A failed Start has stopped the subscriber.
// Transient connection errors after a successful Start are retried in the background
// with backoff until Close.
func (s *Subscriber) Start(ctx context.Context) error {
	if s.o.StartTimeout > 0 {
		var cancelStart context.CancelFunc
		ctx, cancelStart = context.WithTimeout(ctx, s.o.StartTimeout)
		defer cancelStart()
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(runCtx)
	select {
	case <-s.ready:
		return nil
	case <-s.done:
		return s.Err()
	case <-ctx.Done():
		s.Close()
		s.errMu.Lock()
		last := s.last
		s.errMu.Unlock()
		if last == nil {
			last = errors.New("no reply from Redis")
		}
		return fmt.Errorf("%w: %w (last error: %w)", ErrUnreachable, ctx.Err(), last)
	}
}

// Err is the error that stopped the subscriber, if any.
func (s *Subscriber) Err() error {
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Close stops the subscriber and waits for its goroutine.
func (s *Subscriber) Close() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
}

func (s *Subscriber) run(ctx context.Context) {
	defer close(s.done)
	delay := 50 * time.Millisecond
	for ctx.Err() == nil {
		err := s.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if fatal(err) {
			s.errMu.Lock()
			s.err = fmt.Errorf("hotkeyd subscriber: %w", err)
			s.errMu.Unlock()
			s.o.Logger.Error("hotkeyd subscriber stopped", "err", err)
			return
		}
		s.errMu.Lock()
		s.last = err
		s.errMu.Unlock()
		// A lost subscription may have missed invalidations: drop every local copy now,
		// not only once reconnected (spec/failure.md, subscription_lost).
		if s.o.OnReset != nil {
			s.o.OnReset()
		}
		atomic.AddInt64(&s.stats.Reconnects, 1)
		atomic.AddInt64(&s.stats.Lost, 1)
		s.o.Logger.Warn("hotkeyd subscriber disconnected; reconnecting", "err", err, "in", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay + time.Duration(rand.Int64N(int64(delay)/2+1))):
		}
		if delay *= 2; delay > 5*time.Second {
			delay = 5 * time.Second
		}
	}
}

// fatal tells errors that retrying cannot fix.
func fatal(err error) bool {
	if err == nil {
		return false
	}
	var rerr redis.Error
	if errors.As(err, &rerr) {
		msg := rerr.Error()
		for _, p := range []string{"NOPERM", "WRONGPASS", "NOAUTH", "WRONGTYPE"} {
			if len(msg) >= len(p) && msg[:len(p)] == p {
				return true
			}
		}
	}
	return false
}

func (s *Subscriber) session(ctx context.Context) error {
	// Invalidations first: a ClusterClient subscribes on the primary that owns the first
	// channel's slot, where the daemon and the SDKs publish them (a message published on
	// another node crosses the cluster bus, whose links Redis 7.0 leaves with Nagle's
	// algorithm on: up to 40 ms more).
	var channels []string
	if s.o.OnInvalidate != nil || s.o.OnInvalidationPayload != nil {
		channels = append(channels, s.o.Namespace.InvalidateChannel())
	}
	channels = append(channels, s.o.Namespace.EventsChannel())
	if s.o.OnHeartbeat != nil {
		channels = append(channels, s.o.Namespace.WatchChannel())
	}
	recv, ping, closeAll, err := s.subscribe(ctx, channels)
	if err != nil {
		return err
	}
	defer closeAll()
	atomic.AddInt64(&s.stats.Connects, 1)
	if s.o.OnReset != nil {
		s.o.OnReset()
	}
	if err := s.bootstrap(ctx, nil); err != nil {
		return err
	}
	s.once.Do(func() { close(s.ready) })
	lastResync, lastExpire := time.Now(), time.Time{}
	health := pingCheck{interval: s.o.HealthInterval, heard: time.Now()}
	for {
		msg, err := recv(100 * time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		switch health.after(time.Now(), err == nil) {
		case pingNow:
			if perr := ping(ctx); perr != nil {
				return perr
			}
		case pingDead:
			return errNoPong
		}
		if now := time.Now(); now.Sub(lastExpire) >= expireEvery {
			// A full scan: once per interval, never per message (a flood of small
			// messages would otherwise cost O(hot keys) each and delay invalidations).
			lastExpire = now
			s.hot.Expire()
		}
		if time.Since(lastResync) >= s.o.ResyncEvery {
			lastResync = time.Now()
			if err := s.bootstrap(ctx, nil); err != nil {
				return err
			}
		}
		if err != nil {
			var nerr interface{ Timeout() bool }
			if errors.As(err, &nerr) && nerr.Timeout() {
				continue
			}
			return err
		}
		m, ok := msg.(*redis.Message)
		if !ok {
			continue
		}
		if m.Channel == s.o.Namespace.WatchChannel() && s.o.OnHeartbeat != nil {
			s.o.OnHeartbeat([]byte(m.Payload))
			continue
		}
		if m.Channel == s.o.Namespace.InvalidateChannel() && s.o.OnInvalidationPayload != nil {
			atomic.AddInt64(&s.stats.Invalidations, 1)
			s.o.OnInvalidationPayload([]byte(m.Payload))
			continue
		}
		if m.Channel == s.o.Namespace.InvalidateChannel() && s.o.OnInvalidate != nil {
			origin, keys, derr := DecodeInvalidation([]byte(m.Payload))
			if derr != nil {
				atomic.AddInt64(&s.stats.BadMessages, 1)
				continue
			}
			atomic.AddInt64(&s.stats.Invalidations, 1)
			s.o.OnInvalidate(origin, keys)
			continue
		}
		if err := s.handle(ctx, []byte(m.Payload)); err != nil {
			return err
		}
	}
}

// Parse validates one channel message: size, signature, format, clock. It returns
// false (and counts why) for a message that must not be applied.
func (s *Subscriber) Parse(payload []byte) (Message, bool) {
	atomic.AddInt64(&s.stats.Messages, 1)
	if len(payload) > s.o.MaxMessageBytes {
		atomic.AddInt64(&s.stats.BadMessages, 1)
		return Message{}, false
	}
	if s.o.Auth != nil {
		body, ok := s.o.Auth.Verify(payload)
		if !ok {
			atomic.AddInt64(&s.stats.Unsigned, 1)
			return Message{}, false
		}
		payload = body
	}
	msg, skipped, err := DecodeMessage(payload)
	atomic.AddInt64(&s.stats.BadEntries, int64(skipped))
	if err != nil {
		atomic.AddInt64(&s.stats.BadMessages, 1)
		return Message{}, false
	}
	if msg.TS > s.o.Now()+s.o.MaxClockSkew.Seconds() {
		atomic.AddInt64(&s.stats.Suspect, 1) // a forged future ts would outlive the real daemon
		return Message{}, false
	}
	return msg, true
}

// subscribe subscribes to channels and waits for every confirmation. Plain pub/sub uses
// one connection; sharded pub/sub one per channel, since each channel lives on the node
// that serves its slot (one SSUBSCRIBE cannot name channels of different slots).
func (s *Subscriber) subscribe(ctx context.Context, channels []string) (
	recv func(time.Duration) (any, error), ping func(context.Context) error, closeAll func(), err error,
) {
	if !s.o.Sharded {
		ps := s.o.Client.Subscribe(ctx, channels...)
		for range channels {
			if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
				ps.Close()
				return nil, nil, nil, err
			}
		}
		recv = func(d time.Duration) (any, error) { return ps.ReceiveTimeout(ctx, d) }
		return recv, func(ctx context.Context) error { return ps.Ping(ctx) }, func() { ps.Close() }, nil
	}
	type item struct {
		msg any
		err error
	}
	var pss []*redis.PubSub
	closeAll = func() {
		for _, ps := range pss {
			ps.Close()
		}
	}
	for _, ch := range channels {
		ps := s.o.Client.SSubscribe(ctx, ch)
		pss = append(pss, ps)
		if _, err := ps.ReceiveTimeout(ctx, 5*time.Second); err != nil {
			closeAll()
			return nil, nil, nil, err
		}
	}
	out := make(chan item, 1024)
	rctx, cancel := context.WithCancel(ctx)
	for _, ps := range pss {
		go func(ps *redis.PubSub) {
			for rctx.Err() == nil {
				m, err := ps.Receive(rctx)
				select {
				case out <- item{m, err}:
				case <-rctx.Done():
					return
				}
				if err != nil {
					return
				}
			}
		}(ps)
	}
	recv = func(d time.Duration) (any, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case it := <-out:
			return it.msg, it.err
		case <-t.C:
			return nil, timeoutError{}
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	ping = func(ctx context.Context) error { // every shard's connection: a PONG each
		for _, ps := range pss {
			if err := ps.Ping(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	return recv, ping, func() { cancel(); closeAll() }, nil
}

// expireEvery is how often the subscriber drops keys whose TTL ran out.
const expireEvery = 100 * time.Millisecond

// errNoPong: the subscription stayed silent and did not answer PING (a half-open
// connection, e.g. a peer or middlebox that stopped forwarding without closing).
var errNoPong = errors.New("hotkeyd subscriber: no reply to PING; connection presumed dead")

type pingAction int

const (
	pingWait pingAction = iota
	pingNow
	pingDead
)

// pingCheck decides when a silent subscription is PINGed and when it is dead.
type pingCheck struct {
	interval      time.Duration
	heard, pinged time.Time
}

// after is called after each receive (got: something arrived, a PONG included).
func (c *pingCheck) after(now time.Time, got bool) pingAction {
	switch {
	case got:
		c.heard, c.pinged = now, time.Time{}
	case !c.pinged.IsZero():
		if now.Sub(c.pinged) > c.interval {
			return pingDead
		}
	case now.Sub(c.heard) >= c.interval:
		c.pinged = now
		return pingNow
	}
	return pingWait
}

type timeoutError struct{}

func (timeoutError) Error() string { return "receive timeout" }
func (timeoutError) Timeout() bool { return true }

// handle applies one message of the events channel: what a live subscription does with
// each one (the conformance vectors drive it too). Content problems are counted, never
// returned; the error is the snapshot store's.
func (s *Subscriber) handle(ctx context.Context, payload []byte) error {
	msg, ok := s.Parse(payload)
	if !ok {
		return nil
	}
	atomic.StoreInt64(&s.stats.LastNotification, time.Now().UnixMilli())
	res := s.hot.Apply(msg, false)
	if res == Gap {
		atomic.AddInt64(&s.stats.Gaps, 1)
		snaps, err := s.readSnapshots(ctx, []string{msg.Instance})
		if err != nil {
			return err
		}
		res = s.AfterResync(msg, snaps)
	}
	s.count(res)
	return nil
}

// AfterResync applies the snapshots read after msg revealed a gap, then msg itself
// unless its seq is far ahead of its instance's snapshot (suspect: the daemon writes
// its snapshot in the same transaction as each message, so a real one never is).
func (s *Subscriber) AfterResync(msg Message, snaps []Message) ApplyResult {
	for _, snap := range snaps {
		s.hot.Apply(snap, true)
		if snap.Instance == msg.Instance && msg.Seq > snap.Seq+s.hot.o.MaxSeqJump {
			atomic.AddInt64(&s.stats.Suspect, 1)
			return Stale
		}
	}
	res := s.hot.Apply(msg, false)
	if res == Gap { // the snapshot lags too: apply anyway, the TTLs heal the rest
		res = s.hot.Apply(msg, true)
	}
	return res
}

func (s *Subscriber) count(res ApplyResult) {
	switch res {
	case Applied:
		atomic.AddInt64(&s.stats.Applied, 1)
	case Stale:
		atomic.AddInt64(&s.stats.Stale, 1)
	case Refused:
		atomic.AddInt64(&s.stats.Refused, 1)
	}
}

// bootstrap reads the snapshots of live instances (or of the given ones) and applies them.
func (s *Subscriber) bootstrap(ctx context.Context, instances []string) error {
	snaps, err := s.readSnapshots(ctx, instances)
	if err != nil {
		return err
	}
	for _, m := range snaps {
		s.hot.Apply(m, true)
	}
	return nil
}

// readSnapshots reads the snapshots with one GET each (snapshot keys may live in
// different cluster slots); a bad snapshot is skipped and counted.
func (s *Subscriber) readSnapshots(ctx context.Context, instances []string) ([]Message, error) {
	if instances == nil {
		ids, err := s.snaps.live(ctx, s.o.Now()-s.o.StaleAfter.Seconds())
		if err != nil {
			return nil, err
		}
		instances = ids
	}
	atomic.AddInt64(&s.stats.Resyncs, 1)
	var out []Message
	for _, inst := range instances {
		raw, found, err := s.snaps.get(ctx, inst)
		if err != nil {
			return nil, err
		}
		if !found {
			continue
		}
		if s.o.Auth != nil {
			body, ok := s.o.Auth.Verify(raw)
			if !ok {
				atomic.AddInt64(&s.stats.Unsigned, 1)
				continue
			}
			raw = body
		}
		msg, skipped, derr := DecodeMessage(raw)
		atomic.AddInt64(&s.stats.BadEntries, int64(skipped))
		if derr != nil {
			atomic.AddInt64(&s.stats.BadMessages, 1)
			s.o.Logger.Warn("hotkeyd: corrupt snapshot skipped", "instance", inst, "err", derr)
			continue
		}
		msg.Full = true
		out = append(out, msg)
	}
	return out, nil
}

// snapshotStore is where the subscriber reads the daemons' snapshots: Redis (a map in the
// conformance runner, which otherwise drives the subscriber exactly as a live one runs).
type snapshotStore interface {
	// live lists the instances whose heartbeat is at or after since (unix s).
	live(ctx context.Context, since float64) ([]string, error)
	// get returns the raw snapshot of instance; found is false when there is none.
	get(ctx context.Context, instance string) (raw []byte, found bool, err error)
}

type redisSnapshots struct {
	rc redis.UniversalClient
	ns Namespace
}

func (r redisSnapshots) live(ctx context.Context, since float64) ([]string, error) {
	return r.rc.ZRangeByScore(ctx, r.ns.Instances(), &redis.ZRangeBy{
		Min: strconv.FormatFloat(since, 'f', 3, 64), Max: "+inf",
	}).Result()
}

func (r redisSnapshots) get(ctx context.Context, instance string) ([]byte, bool, error) {
	raw, err := r.rc.Get(ctx, r.ns.Snapshot(instance)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return raw, err == nil, err
}
