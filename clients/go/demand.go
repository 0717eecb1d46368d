package hotkeyd

import (
	"bytes"
	"context"
	"os"
	"sort"
	"sync/atomic"
	"time"
)


// DemandStats count what the demand reporter sent and lost.
type DemandStats struct {
	Reports, Entries, Dropped, SendErrors int64
}

// demandReporter counts the reads a cache served locally and reports them to the daemon
// instance that announced each key, so the daemon keeps seeing the demand its
// announcement moved off Redis (without it the key would cool and flap).
type demandReporter struct {
	app      string
	seq      int64
	interval time.Duration
	ns       Namespace
	hot      *HotSet
	publish  func(ctx context.Context, channel string, payload []byte) error
	auth     *MessageAuth // the reporter key (never the daemon's signing key), or nil
	stats    DemandStats
	stop     chan struct{}
	done     chan struct{}
}

func newDemandReporter(publish func(context.Context, string, []byte) error, ns Namespace, hot *HotSet, app string, interval time.Duration) *demandReporter {
	if interval <= 0 {
		interval = minReportInterval
	}
	return &demandReporter{app: app, interval: interval, ns: ns, hot: hot, auth: ReporterKeyFromEnv(),
		publish: publish, stop: make(chan struct{}), done: make(chan struct{})}
}

// ReporterKeyFromEnv is the reporter key that signs demand reports: the first key of the
// file named by HOTKEYD_DEMAND_KEY_FILE, or HOTKEYD_DEMAND_KEY; nil when neither is set
// or the key is unusable (reports then go unsigned; a daemon requiring signed ones drops
// and counts them).
func ReporterKeyFromEnv() *MessageAuth {
	var key []byte
	if path := os.Getenv("HOTKEYD_DEMAND_KEY_FILE"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		key = bytes.TrimRight(bytes.SplitN(bytes.TrimLeft(data, "\r\n"), []byte("\n"), 2)[0], "\r")
	} else if v := os.Getenv("HOTKEYD_DEMAND_KEY"); v != "" {
		key = []byte(v)
	} else {
		return nil
	}
	a, err := NewMessageAuth(key)
	if err != nil {
		return nil
	}
	return a
}

func (d *demandReporter) start() { go d.loop() }

func (d *demandReporter) close() {
	close(d.stop)
	<-d.done
}

func (d *demandReporter) loop() {
	defer close(d.done)
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			d.flush()
			return
		case <-t.C:
			d.flush()
		}
	}
}

// DemandCount is one key's locally served reads in a report interval.
type DemandCount struct {
	Key Key
	N   uint64
}

// flush sends one report per daemon instance with what was counted since the last one.
func (d *demandReporter) flush() {
	reads := d.hot.takeServed()
	if len(reads) == 0 {
		return
	}
	ts := float64(time.Now().UnixNano()) / 1e9
	reports := BuildDemandReports(d.app, d.seq, ts, d.interval, reads)
	d.seq += int64(len(reports))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, rep := range reports {
		atomic.AddInt64(&d.stats.Dropped, int64(rep.Dropped))
		payload := rep.Payload
		if d.auth != nil {
			if signed, err := d.auth.Sign(payload); err == nil {
				payload = signed
			}
		}
		if err := d.publish(ctx, d.ns.DemandChannel(rep.Instance), payload); err != nil {
			atomic.AddInt64(&d.stats.SendErrors, 1)
			continue
		}
		atomic.AddInt64(&d.stats.Reports, 1)
		atomic.AddInt64(&d.stats.Entries, int64(rep.Entries))
	}
}

// DemandRead is what a cache served locally for one key in one interval, and the daemon
// instance that most recently announced the key.
type DemandRead struct {
	Key      Key
	N        uint64
	Instance string
}

// DemandReport is one message for one daemon instance.
type DemandReport struct {
	Instance string
	Seq      int64
	Payload  []byte
	Entries  int
	Dropped  uint64 // reads not reported: beyond the heaviest MaxDemandEntries, or above 2^32-1
}

// BuildDemandReports turns one interval's reads into one report per instance (wire format
// demand-v1), numbered from nextSeq. Instances are taken in name order.
func BuildDemandReports(app string, nextSeq int64, ts float64, interval time.Duration, reads []DemandRead) []DemandReport {
	byInst := map[string][]DemandCount{}
	for _, r := range reads {
		byInst[r.Instance] = append(byInst[r.Instance], DemandCount{Key: r.Key, N: r.N})
	}
	names := make([]string, 0, len(byInst))
	for n := range byInst {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]DemandReport, 0, len(names))
	for _, inst := range names {
		payload, kept, dropped := EncodeDemand(app, nextSeq, ts, interval, byInst[inst])
		out = append(out, DemandReport{Instance: inst, Seq: nextSeq, Payload: payload, Entries: kept, Dropped: dropped})
		nextSeq++
	}
	return out
}

// EncodeDemand builds one demand report (wire format demand-v1): at most
// MaxDemandEntries entries, the heaviest first; returns the payload, how many entries it
// holds and how many reads it could not carry.
func EncodeDemand(app string, seq int64, ts float64, interval time.Duration, items []DemandCount) ([]byte, int, uint64) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].N != items[j].N {
			return items[i].N > items[j].N
		}
		if items[i].Key.Bytes != items[j].Key.Bytes {
			return items[i].Key.Bytes < items[j].Key.Bytes
		}
		return items[i].Key.DB < items[j].Key.DB
	})
	var dropped uint64
	if len(items) > MaxDemandEntries {
		for _, it := range items[MaxDemandEntries:] {
			dropped += it.N
		}
		items = items[:MaxDemandEntries]
	}
	payload := encodeDemandEntries(app, seq, ts, interval, items)
	for len(payload) > MaxDemandBytes && len(items) > 1 { // long keys: halve, heaviest kept
		keep := len(items) / 2
		for _, it := range items[keep:] {
			dropped += it.N
		}
		items = items[:keep]
		payload = encodeDemandEntries(app, seq, ts, interval, items)
	}
	for _, it := range items {
		if it.N > MaxReportCount {
			dropped += it.N - MaxReportCount
		}
	}
	return payload, len(items), dropped
}

func encodeDemandEntries(app string, seq int64, ts float64, interval time.Duration, items []DemandCount) []byte {
	entries := make([]map[string]any, len(items))
	for i, it := range items {
		e := EncodeKey([]byte(it.Key.Bytes))
		if it.Key.DB != 0 {
			e["db"] = it.Key.DB
		}
		e["n"] = min(it.N, MaxReportCount)
		entries[i] = e
	}
	return marshal(map[string]any{
		"v": 1, "type": "demand", "app": app, "seq": seq, "ts": ts,
		"interval_ms": interval.Milliseconds(), "entries": entries,
	})
}
