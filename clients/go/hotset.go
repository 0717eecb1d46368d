package hotkeyd

import (
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the time source of the hot set and the cache; tests pass a manual clock.
type Clock interface {
	// Monotonic returns a monotonic reading in seconds.
	Monotonic() float64
}

type systemClock struct{ start time.Time }

func (c systemClock) Monotonic() float64 { return time.Since(c.start).Seconds() }

// SystemClock is the real monotonic clock.
func SystemClock() Clock { return systemClock{start: time.Now()} }

// ApplyResult says what HotSet.Apply did with a message.
type ApplyResult int

const (
	// Applied: the message changed (or refreshed) the hot set.
	Applied ApplyResult = iota
	// Stale: its seq was already seen (a duplicate, or covered by a newer snapshot).
	Stale
	// Gap: the seq jumped or the instance is unknown: resync from the snapshot, then
	// apply again with force.
	Gap
	// Refused: a new instance beyond MaxInstances (counted; nothing changed).
	Refused
)

func (r ApplyResult) String() string {
	return [...]string{"applied", "stale", "gap", "refused"}[r]
}

// HotItem is one hot key as readers see it.
type HotItem struct {
	Entry   HotEntry
	Expires float64 // monotonic seconds
	owner   string  // the instance that most recently announced the key
	served  atomic.Uint64
}

type instanceState struct {
	seq    int64
	hasSeq bool
	ts     float64
	final  bool
	seen   float64
	keys   map[Key]float64
	since  map[Key]int64 // the seq of the announcement that made the key hot here
}

// HotSetOptions bound the hot set and register listeners.
type HotSetOptions struct {
	Clock              Clock
	MaxKeys            int           // default 100000; new keys beyond it are dropped and counted
	MaxKeysPerInstance int           // default 10000
	MaxInstances       int           // default 10000; a new instance beyond it is refused and counted
	ForgetIdle         time.Duration // default 5m: silent instances holding no keys are forgotten
	MaxTTL             time.Duration // default 60s: a longer announced ttl_ms is cut (forged TTLs)
	MaxSeqJump         int64         // default 1000: a full message further ahead is a gap, checked against the snapshot
	OnHot              func(HotEntry)
	OnCool             func(Key)
}

// HotSet is the merged set of keys announced hot by every daemon instance.
// Reads take a read lock only; Apply and Expire are called by the subscriber.
type HotSet struct {
	mu        sync.RWMutex
	o         HotSetOptions
	items     map[Key]*HotItem
	instances map[string]*instanceState
	dropped   int64
	forgotten int64
	clamped   int64
	refused   int64
	scannedAt float64
}

// NewHotSet returns an empty hot set.
func NewHotSet(o HotSetOptions) *HotSet {
	if o.Clock == nil {
		o.Clock = SystemClock()
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = maxHotKeys
	}
	if o.MaxInstances <= 0 {
		o.MaxInstances = maxInstances
	}
	if o.ForgetIdle <= 0 {
		o.ForgetIdle = forgetIdle
	}
	if o.MaxTTL <= 0 {
		o.MaxTTL = maxTTL
	}
	if o.MaxKeysPerInstance <= 0 {
		o.MaxKeysPerInstance = maxKeysPerInstance
	}
	if o.MaxSeqJump <= 0 {
		o.MaxSeqJump = maxSeqJump
	}
	return &HotSet{o: o, items: map[Key]*HotItem{}, instances: map[string]*instanceState{}, scannedAt: -1e9}
}

// Get returns the entry of key if it is hot now.
func (s *HotSet) Get(k Key) (HotEntry, bool) {
	s.mu.RLock()
	it, ok := s.items[k]
	var e HotEntry
	if ok {
		e = it.Entry
		ok = it.Expires > s.o.Clock.Monotonic()
	}
	s.mu.RUnlock()
	return e, ok
}

// Owner returns the daemon instance that most recently announced key.
func (s *HotSet) Owner(k Key) (string, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if it, ok := s.items[k]; ok {
		return it.owner, true
	}
	return "", false
}

// item returns k's item if it is hot at now (the read path: one read lock, one lookup).
func (s *HotSet) item(k Key, now float64) *HotItem {
	s.mu.RLock()
	it := s.items[k]
	var exp float64
	if it != nil {
		exp = it.Expires
	}
	s.mu.RUnlock()
	if it == nil || exp <= now {
		return nil
	}
	return it
}

// takeServed collects and resets the locally served reads counted on every item.
func (s *HotSet) takeServed() []DemandRead {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var out []DemandRead
	for k, it := range s.items {
		if n := it.served.Swap(0); n > 0 {
			out = append(out, DemandRead{Key: k, N: n, Instance: it.owner})
		}
	}
	return out
}

// Keys returns the keys hot now.
func (s *HotSet) Keys() []Key {
	now := s.o.Clock.Monotonic()
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]Key, 0, len(s.items))
	for k, it := range s.items {
		if it.Expires > now {
			out = append(out, k)
		}
	}
	return out
}

// Len is the number of keys held (some may be past their expiry until Expire runs).
func (s *HotSet) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.items)
}

// LastSeq returns the last applied sequence number of instance.
func (s *HotSet) LastSeq(instance string) (int64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.instances[instance]
	if !ok || !st.hasSeq {
		return 0, false
	}
	return st.seq, true
}

// Dropped counts announcements refused by the MaxKeys bound.
func (s *HotSet) Dropped() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.dropped
}

// Apply applies one message (or snapshot). With force it applies across a gap.
func (s *HotSet) Apply(msg Message, force bool) ApplyResult {
	now := s.o.Clock.Monotonic()
	var turnedHot []HotEntry
	var cooled []Key
	s.mu.Lock()
	st := s.instances[msg.Instance]
	if st == nil && !s.roomForInstance(now) {
		s.refused++
		s.mu.Unlock()
		return Refused
	}
	if msg.Full {
		if st != nil && st.hasSeq && !newerFull(st, msg) {
			s.mu.Unlock()
			return Stale
		}
		if st != nil && st.hasSeq && msg.Seq > st.seq+s.o.MaxSeqJump && !force {
			s.mu.Unlock()
			return Gap
		}
		if st == nil {
			st = newInstance()
			s.instances[msg.Instance] = st
		}
		old := st.keys
		st.keys = map[Key]float64{}
		turnedHot = s.announce(msg.Instance, st, msg, now, turnedHot)
		for k := range old {
			if _, still := st.keys[k]; !still {
				delete(st.since, k)
				cooled = s.withdraw(k, now, cooled)
			}
		}
	} else {
		if st != nil && st.hasSeq && msg.Seq <= st.seq {
			s.mu.Unlock()
			return Stale
		}
		gap := st == nil || !st.hasSeq || msg.Seq != st.seq+1
		if gap && !force {
			s.mu.Unlock()
			return Gap
		}
		if st == nil {
			st = newInstance()
			s.instances[msg.Instance] = st
		}
		turnedHot = s.announce(msg.Instance, st, msg, now, turnedHot)
		for _, c := range msg.Cool {
			k := Key{string(c.Key), c.DB}
			delete(st.since, k)
			if _, ok := st.keys[k]; ok {
				delete(st.keys, k)
				cooled = s.withdraw(k, now, cooled)
			}
		}
	}
	st.seq, st.hasSeq, st.ts, st.final, st.seen = msg.Seq, true, msg.TS, msg.Final, now
	s.mu.Unlock()
	s.notify(turnedHot, cooled)
	return Applied
}

// hotSince: (instance, seq that made k hot there) for each instance holding k now,
// by instance name; what a strict read's guard checks the watch's armed against.
func (s *HotSet) hotSince(k Key, now float64) []instSeq {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []instSeq
	for name, st := range s.instances {
		if exp, ok := st.keys[k]; ok && exp > now {
			if seq, ok := st.since[k]; ok {
				out = append(out, instSeq{name, seq})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].instance < out[j].instance })
	return out
}

// Expire removes keys whose TTL ran out and forgets idle instances; returns how many cooled.
func (s *HotSet) Expire() int {
	now := s.o.Clock.Monotonic()
	var cooled []Key
	s.mu.Lock()
	for _, st := range s.instances {
		for k, exp := range st.keys {
			if exp <= now {
				delete(st.keys, k)
				delete(st.since, k)
			}
		}
	}
	for k, it := range s.items {
		if it.Expires <= now {
			cooled = s.withdraw(k, now, cooled)
		}
	}
	s.forgetInstances(now, false)
	s.mu.Unlock()
	s.notify(nil, cooled)
	return len(cooled)
}

// Clear forgets everything (OnCool fires for every key).
func (s *HotSet) Clear() {
	s.mu.Lock()
	cooled := make([]Key, 0, len(s.items))
	for k := range s.items {
		cooled = append(cooled, k)
	}
	s.items = map[Key]*HotItem{}
	s.instances = map[string]*instanceState{}
	s.mu.Unlock()
	s.notify(nil, cooled)
}

func newInstance() *instanceState {
	return &instanceState{keys: map[Key]float64{}, since: map[Key]int64{}}
}

// roomForInstance: whether a new instance may be tracked (lock held). At the cap, idle
// keyless instances are forgotten, but that scan runs at most once a second, so a flood
// of forged instance ids costs linear time, not quadratic.
func (s *HotSet) roomForInstance(now float64) bool {
	if len(s.instances) < s.o.MaxInstances {
		return true
	}
	if now-s.scannedAt >= 1 {
		s.scannedAt = now
		s.forgetInstances(now, true)
	}
	return len(s.instances) < s.o.MaxInstances
}

func (s *HotSet) announce(name string, st *instanceState, msg Message, now float64, turned []HotEntry) []HotEntry {
	maxTTLms := s.o.MaxTTL.Milliseconds()
	for _, h := range msg.Hot {
		if h.TTLms > maxTTLms {
			h.TTLms = maxTTLms
			s.clamped++
		}
		k := Key{string(h.Key), h.DB}
		if _, held := st.keys[k]; !held && len(st.keys) >= s.o.MaxKeysPerInstance {
			s.dropped++
			continue
		}
		exp := now + float64(h.TTLms)/1000
		it, ok := s.items[k]
		if !ok {
			if len(s.items) >= s.o.MaxKeys {
				s.dropped++
				continue
			}
			s.items[k] = &HotItem{Entry: h, Expires: exp, owner: name}
			turned = append(turned, h)
		} else {
			it.Entry = h
			if it.Expires > now && it.Expires > exp {
				exp = it.Expires
			}
			it.Expires = exp
			it.owner = name
		}
		st.keys[k] = exp
		if _, ok := st.since[k]; !ok {
			st.since[k] = msg.Seq
		}
	}
	return turned
}

func (s *HotSet) withdraw(k Key, now float64, cooled []Key) []Key {
	best := 0.0
	bestOwner := ""
	for name, st := range s.instances {
		if exp, ok := st.keys[k]; ok && exp > best {
			best, bestOwner = exp, name
		}
	}
	it, ok := s.items[k]
	if !ok {
		return cooled
	}
	if best > now {
		it.Expires = best
		it.owner = bestOwner
		return cooled
	}
	delete(s.items, k)
	return append(cooled, k)
}

func (s *HotSet) forgetInstances(now float64, overCap bool) {
	type idle struct {
		seen float64
		name string
	}
	var cands []idle
	for name, st := range s.instances {
		if len(st.keys) == 0 && (st.final || now-st.seen >= s.o.ForgetIdle.Seconds() || overCap) {
			cands = append(cands, idle{st.seen, name})
		}
	}
	if overCap {
		// forget the longest-silent first, one more than the excess (room for a new one)
		sort.Slice(cands, func(i, j int) bool { return cands[i].seen < cands[j].seen })
		if n := len(s.instances) - s.o.MaxInstances + 1; n < len(cands) {
			cands = cands[:max(1, n)]
		}
	}
	for _, c := range cands {
		delete(s.instances, c.name)
	}
	s.forgotten += int64(len(cands))
}

func (s *HotSet) notify(turned []HotEntry, cooled []Key) {
	if s.o.OnHot != nil {
		for _, e := range turned {
			s.callSafely(func() { s.o.OnHot(e) })
		}
	}
	if s.o.OnCool != nil {
		for _, k := range cooled {
			s.callSafely(func() { s.o.OnCool(k) })
		}
	}
}

func (s *HotSet) callSafely(f func()) {
	defer func() { _ = recover() }()
	f()
}

// newerFull: a higher seq is newer; a lower seq with a later ts is a restarted daemon
// that kept its instance id.
func newerFull(st *instanceState, msg Message) bool {
	return msg.Seq > st.seq || (msg.Seq < st.seq && msg.TS > st.ts)
}
