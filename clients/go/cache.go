package hotkeyd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"
)

// CacheOptions configure a HotCache. The zero value is usable.
type CacheOptions struct {
	Namespace      Namespace
	MaxEntries     int           // local entries (10000)
	MaxBytes       int           // estimated local bytes (32 MiB)
	MaxTTL         time.Duration // cap on a local copy's life; the rule's ttl_ms otherwise
	StaleFor       time.Duration // serve a stale copy this long while one caller refreshes (1 s)
	WaitTimeout    time.Duration // a caller with no copy waits this long for the refresh (500 ms)
	DemandInterval time.Duration // demand report interval (250 ms)
	DisableDemand  bool          // do not report locally served reads (the key may then cool and flap)
	HotSet         HotSetOptions
	// SnapshotClient reads the daemon's snapshots when it publishes to another db.
	SnapshotClient redis.UniversalClient
	// Sharded: the deployment uses sharded pub/sub (the daemon's --sharded-pubsub):
	// SSUBSCRIBE, and SPUBLISH for invalidations and demand reports.
	// StartTimeout bounds Start (see SubscriberOptions.StartTimeout).
	StartTimeout time.Duration
	Sharded      bool
	// Auth: read only messages signed with one of these keys (the daemon's --auth-key-file).
	Auth   *MessageAuth
	Logger *slog.Logger
	// Consistency: Available (the default: copies live until their TTL, lapses of the
	// daemon's watch are counted) or Strict (a copy is served only while the watch of
	// its node vouches for it; docs/consistency.md). NewHotCache panics on another value.
	Consistency Consistency
}

// HotCache serves hot keys from process memory and passes everything else to Redis.
//
// A key is served locally only while the daemon says it is hot, for at most the ttl_ms
// of the rule that made it hot (capped by MaxTTL), so even if every invalidation were
// lost a reader sees a value at most that old. Writes through the cache publish an
// invalidation in the same round trip, and every HotCache drops its copy.
type HotCache struct {
	client  redis.UniversalClient
	sub     *Subscriber
	hotset  *HotSet
	local   *localCache
	demand  *demandReporter
	db      int
	origin  string
	ns      Namespace
	sharded bool
	maxTTL  float64
	clock   Clock
	gate    *watchGate
	auth    *MessageAuth
}

type nilable struct {
	s     string
	isNil bool
}

func (n nilable) result() (string, error) {
	if n.isNil {
		return "", redis.Nil
	}
	return n.s, nil
}

// NewHotCache wraps client (a *redis.Client or *redis.ClusterClient, or any
// UniversalClient). Call Start before use.
func NewHotCache(client redis.UniversalClient, o CacheOptions) *HotCache {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 10_000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 32 << 20
	}
	if o.StaleFor <= 0 {
		o.StaleFor = time.Second
	}
	if o.WaitTimeout <= 0 {
		o.WaitTimeout = 500 * time.Millisecond
	}
	if o.HotSet.Clock == nil {
		o.HotSet.Clock = SystemClock()
	}
	c := &HotCache{client: client, ns: o.Namespace, sharded: o.Sharded, clock: o.HotSet.Clock, origin: newOrigin(), auth: o.Auth}
	if o.MaxTTL > 0 {
		c.maxTTL = o.MaxTTL.Seconds()
	}
	if rc, ok := client.(*redis.Client); ok {
		c.db = rc.Options().DB
	}
	c.local = newLocalCache(o.MaxEntries, o.MaxBytes, o.StaleFor, o.WaitTimeout, c.clock)
	userCool := o.HotSet.OnCool
	o.HotSet.OnCool = func(k Key) {
		c.local.invalidate(k.Bytes)
		if userCool != nil {
			userCool(k)
		}
	}
	var gate *watchGate
	c.sub = NewSubscriber(SubscriberOptions{
		Client: client, SnapshotClient: o.SnapshotClient, Namespace: o.Namespace, HotSet: o.HotSet,
		OnInvalidationPayload: func(p []byte) { gate.onInvalidation(p) },
		OnHeartbeat:           func(p []byte) { gate.onHeartbeat(p) },
		OnReset: func() {
			c.local.clear()
			gate.reset()
		},
		Logger: o.Logger, Sharded: o.Sharded, Auth: o.Auth,
		StartTimeout: o.StartTimeout,
	})
	c.hotset = c.sub.HotSet()
	gate, err := newWatchGate(o.Consistency, c.hotset, c.clock, o.Auth, c.local.invalidate, c.local.clear)
	if err != nil {
		panic(err)
	}
	c.gate = gate
	if !o.DisableDemand {
		c.demand = newDemandReporter(c.publish, o.Namespace, c.hotset, c.origin, o.DemandInterval)
	}
	return c
}

func newOrigin() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Start subscribes and bootstraps the hot set (see Subscriber.Start).
func (c *HotCache) Start(ctx context.Context) error {
	if err := c.sub.Start(ctx); err != nil {
		return err
	}
	if c.demand != nil {
		c.demand.start()
	}
	return nil
}

// Close stops the subscriber and the demand reporter (after a last report). The
// wrapped client is the caller's and stays open.
func (c *HotCache) Close() error {
	if c.demand != nil {
		c.demand.close()
	}
	c.sub.Close()
	return nil
}

// Client is the wrapped go-redis client, for every command the cache does not wrap.
func (c *HotCache) Client() redis.UniversalClient { return c.client }

// HotSet is the live hot set.
func (c *HotCache) HotSet() *HotSet { return c.hotset }

// Subscriber is the cache's subscriber (stats, errors).
func (c *HotCache) Subscriber() *Subscriber { return c.sub }

// Stats of the local cache.
func (c *HotCache) Stats() CacheStats { return c.local.Stats() }

// DemandStats of the demand reporter.
func (c *HotCache) DemandStats() DemandStats {
	if c.demand == nil {
		return DemandStats{}
	}
	return c.demand.stats
}

// WatchStats: heartbeats heard, epoch changes, lapses and strict-mode misses.
func (c *HotCache) WatchStats() WatchStats { return c.gate.stats() }

// IntakeStats: invalidations applied, deferred by the per-key limit, and dropped.
func (c *HotCache) IntakeStats() IntakeStats {
	c.gate.intake.mu.Lock()
	defer c.gate.intake.mu.Unlock()
	return c.gate.intake.stats
}

// Origin identifies this cache in invalidations and demand reports.
func (c *HotCache) Origin() string { return c.origin }

// hot returns key's hot item (nil when cold for this client's db), the time, and the
// local TTL (s) of a copy.
func (c *HotCache) hot(key string) (*HotItem, float64, float64) {
	now := c.clock.Monotonic()
	it := c.hotset.item(Key{key, c.db}, now)
	if it == nil {
		return nil, now, 0
	}
	ttl := float64(it.Entry.TTLms) / 1000
	if c.maxTTL > 0 && ttl > c.maxTTL {
		ttl = c.maxTTL
	}
	return it, now, ttl
}

// served counts a read the cache answered from memory (Redis never saw it): one atomic
// add on the hot item, flushed as a demand report.
func (c *HotCache) served(it *HotItem, local bool) {
	if local && c.demand != nil {
		it.served.Add(1)
	}
}

func (c *HotCache) hotTTL(key string) (float64, bool) {
	it, _, ttl := c.hot(key)
	return ttl, it != nil
}

// Get is GET, served locally while key is hot. A missing key returns redis.Nil.
func (c *HotCache) Get(ctx context.Context, key string) (string, error) {
	it, now, ttl := c.hot(key)
	if it == nil {
		return c.client.Get(ctx, key).Result()
	}
	ck := cacheKey{op: 'g', key: key}
	if c.gate.admit(ck, now) {
		if v, ok := c.local.peek(ck, now); ok {
			c.served(it, true)
			return v.(nilable).result()
		}
	}
	if !c.gate.beforeFetch(ck, c.db, now) {
		return c.client.Get(ctx, key).Result() // strict and unwatched: not cached
	}
	return c.fillString(it, ck, ttl, func() (string, error) { return c.client.Get(ctx, key).Result() })
}

// HGet is HGET, served locally while key is hot.
func (c *HotCache) HGet(ctx context.Context, key, field string) (string, error) {
	it, now, ttl := c.hot(key)
	if it == nil {
		return c.client.HGet(ctx, key, field).Result()
	}
	ck := cacheKey{op: 'h', key: key, field: field}
	if c.gate.admit(ck, now) {
		if v, ok := c.local.peek(ck, now); ok {
			c.served(it, true)
			return v.(nilable).result()
		}
	}
	if !c.gate.beforeFetch(ck, c.db, now) {
		return c.client.HGet(ctx, key, field).Result()
	}
	return c.fillString(it, ck, ttl, func() (string, error) { return c.client.HGet(ctx, key, field).Result() })
}

// fillString loads a string reply of a hot key single-flight (a missing key is
// remembered as nil). The callers peek first, so the closure is only built on a miss.
func (c *HotCache) fillString(it *HotItem, ck cacheKey, ttl float64, fetch func() (string, error)) (string, error) {
	v, local, err := c.local.fill(ck, ttl, func() (any, int, error) {
		s, err := fetch()
		if errors.Is(err, redis.Nil) {
			return nilable{isNil: true}, 0, nil
		}
		return nilable{s: s}, len(s) + len(ck.field), err
	})
	if err != nil {
		return "", err
	}
	c.served(it, local)
	return v.(nilable).result()
}

// HGetAll is HGETALL, served locally while key is hot (the caller gets its own copy).
func (c *HotCache) HGetAll(ctx context.Context, key string) (map[string]string, error) {
	it, now, ttl := c.hot(key)
	if it == nil {
		return c.client.HGetAll(ctx, key).Result()
	}
	ck := cacheKey{op: 'H', key: key}
	if !c.gate.admit(ck, now) && !c.gate.beforeFetch(ck, c.db, now) {
		return c.client.HGetAll(ctx, key).Result()
	}
	v, local, err := c.local.load(ck, now, ttl, func() (any, int, error) {
		m, err := c.client.HGetAll(ctx, key).Result()
		size := 0
		for f, val := range m {
			size += len(f) + len(val) + 32
		}
		return m, size, err
	})
	if err != nil {
		return nil, err
	}
	c.served(it, local)
	src := v.(map[string]string)
	out := make(map[string]string, len(src))
	for f, val := range src {
		out[f] = val
	}
	return out, nil
}

// MGet is MGET: hot keys come from the local cache, the rest in one MGET. Missing keys
// are nil, as in go-redis.
func (c *HotCache) MGet(ctx context.Context, keys ...string) ([]any, error) {
	out := make([]any, len(keys))
	var need []int
	for i, k := range keys {
		if _, hot := c.hotTTL(k); hot {
			v, err := c.Get(ctx, k)
			switch {
			case err == nil:
				out[i] = v
			case errors.Is(err, redis.Nil), isWrongType(err):
				out[i] = nil // MGET answers nil for a missing key or another type
			default:
				return nil, err
			}
			continue
		}
		need = append(need, i)
	}
	if len(need) == 0 {
		return out, nil
	}
	names := make([]string, len(need))
	for j, i := range need {
		names[j] = keys[i]
	}
	vals, err := c.client.MGet(ctx, names...).Result()
	if err != nil {
		return nil, err
	}
	for j, i := range need {
		out[i] = vals[j]
	}
	return out, nil
}

// Cached returns load()'s result, cached locally while key is hot (single-flight); when
// key is cold load runs every time. Call Invalidate after the underlying data changes.
func Cached[T any](ctx context.Context, c *HotCache, key string, load func(context.Context) (T, error)) (T, error) {
	it, now, ttl := c.hot(key)
	if it == nil {
		return load(ctx)
	}
	c.gate.settle(key, now) // not watched (not Redis), but invalidations apply
	v, local, err := c.local.load(cacheKey{op: 'c', key: key}, now, ttl, func() (any, int, error) {
		r, err := load(ctx)
		return r, 64, err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	c.served(it, local)
	return v.(T), nil
}

// Set is SET (expiration 0 = none), then invalidates key in every cache, in one round trip.
func (c *HotCache) Set(ctx context.Context, key string, value any, expiration time.Duration) error {
	return c.write(ctx, []string{key}, func(p redis.Pipeliner) { p.Set(ctx, key, value, expiration) })
}

// Del is DEL, then invalidates keys everywhere; returns how many keys were removed.
func (c *HotCache) Del(ctx context.Context, keys ...string) (int64, error) {
	var cmd *redis.IntCmd
	err := c.write(ctx, keys, func(p redis.Pipeliner) { cmd = p.Del(ctx, keys...) })
	if err != nil {
		return 0, err
	}
	return cmd.Val(), nil
}

// HSet is HSET, then invalidates key everywhere.
func (c *HotCache) HSet(ctx context.Context, key string, values ...any) error {
	return c.write(ctx, []string{key}, func(p redis.Pipeliner) { p.HSet(ctx, key, values...) })
}

// IncrBy is INCRBY, then invalidates key everywhere.
func (c *HotCache) IncrBy(ctx context.Context, key string, n int64) (int64, error) {
	var cmd *redis.IntCmd
	err := c.write(ctx, []string{key}, func(p redis.Pipeliner) { cmd = p.IncrBy(ctx, key, n) })
	if err != nil {
		return 0, err
	}
	return cmd.Val(), nil
}

// Invalidate drops keys here and broadcasts their invalidation (after a DB write, or a
// Redis write made without the cache).
func (c *HotCache) Invalidate(ctx context.Context, keys ...string) error {
	for _, k := range keys {
		c.local.invalidate(k)
	}
	return c.publish(ctx, c.ns.InvalidateChannel(), c.invalidation(keys))
}

// publish sends on a channel with PUBLISH, or SPUBLISH in a sharded deployment.
func (c *HotCache) publish(ctx context.Context, channel string, payload []byte) error {
	if c.sharded {
		return c.client.SPublish(ctx, channel, payload).Err()
	}
	if cc, ok := c.client.(*redis.ClusterClient); ok {
		// On the primary that owns the invalidation channel's slot, where every SDK
		// subscribes: go-redis would send a keyless PUBLISH to any node, and from there it
		// crosses the cluster bus (Nagle on Redis 7.0's outgoing links: up to 40 ms more).
		if home, err := cc.MasterForKey(ctx, c.ns.InvalidateChannel()); err == nil {
			if err := home.Publish(ctx, channel, payload).Err(); err == nil {
				return nil
			}
		} // the home node failed: any node, as go-redis routes it
	}
	return c.client.Publish(ctx, channel, payload).Err()
}

func (c *HotCache) invalidation(keys []string) []byte {
	kb := make([][]byte, len(keys))
	for i, k := range keys {
		kb[i] = []byte(k)
	}
	p := EncodeInvalidation(c.origin, kb)
	if c.auth != nil { // apps with the key drop unsigned invalidations
		if signed, err := c.auth.Sign(p); err == nil {
			return signed
		}
	}
	return p
}

// write runs the write and the invalidation PUBLISH in one pipeline; the local copies
// are dropped whatever happened (a failed write's effect is unknown).
func (c *HotCache) write(ctx context.Context, keys []string, add func(redis.Pipeliner)) error {
	defer func() {
		for _, k := range keys {
			c.local.invalidate(k)
		}
	}()
	if _, ok := c.client.(*redis.ClusterClient); ok && !c.sharded {
		// the write, then the invalidation on its home node (see publish): two round trips
		cmds, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			add(p)
			return nil
		})
		// published also when the write failed: its effect is unknown
		perr := c.publish(ctx, c.ns.InvalidateChannel(), c.invalidation(keys))
		if err != nil {
			return err
		}
		if err := cmds[0].Err(); err != nil {
			return err
		}
		return perr
	}
	cmds, err := c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		add(p)
		if c.sharded {
			p.SPublish(ctx, c.ns.InvalidateChannel(), c.invalidation(keys))
		} else {
			p.Publish(ctx, c.ns.InvalidateChannel(), c.invalidation(keys))
		}
		return nil
	})
	if err != nil {
		return err
	}
	return cmds[0].Err()
}

func isWrongType(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr) && len(rerr.Error()) >= 9 && rerr.Error()[:9] == "WRONGTYPE"
}
