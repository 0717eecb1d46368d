// Package reporter sends an app's key accesses to Kafka, for a hotkeyd daemon that reads
// a Kafka source. It is a package of its own so that an app using only the cache
// (package hotkeyd) does not link a Kafka client.
package reporter

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"

	hotkeyd "github.com/hotkeyd/hotkeyd/clients/go"
)

// Options configure a Reporter.
type Options struct {
	Brokers       []string
	Topic         string
	FlushInterval time.Duration // 100 ms
	SendTimeout   time.Duration // how long a flush waits for its messages to be buffered and sent (5 s)
	MaxKeys       int           // distinct keys buffered between flushes (100000); more are dropped and counted
	MaxBytes      int           // per message (256 KiB)
	// Extra franz-go options (TLS, SASL, client id ...).
	KafkaOptions []kgo.Opt
}

// Stats count what the reporter sent and lost.
// Every recorded access ends up in exactly one of Sent and Dropped (or is still buffered):
// Recorded = Sent + Dropped + buffered. Counts are in accesses, SendErrors and Messages in
// messages.
type Stats struct {
	Recorded int64 // accesses passed to Record
	Sent     int64 // accesses in messages the broker acknowledged
	Messages int64 // messages the broker acknowledged
	// Dropped: accesses lost and counted: the buffer full (MaxKeys), a count over
	// hotkeyd.MaxReportCount, a message that failed for good (too large, not authorized), or
	// still unsent at Close.
	Dropped    int64
	SendErrors int64 // messages whose produce failed
	Requeued   int64 // accesses of failed messages merged back to be sent by a later flush
}

// Reporter pre-aggregates key accesses in memory and sends them to Kafka every flush
// interval, one compact message per partition: "key<TAB>count" lines (the daemon's C
// fast path) and a JSON batch for keys that cannot travel as lines. Each key goes to
// partition murmur3_32(key, 0) mod partitions, exactly as every hotkeyd reporter, so all
// accesses of one key from every app and language reach one daemon of the group.
// Record never blocks; it is safe for concurrent use.
type Reporter struct {
	o      Options
	kc     *kgo.Client
	mu     sync.Mutex
	counts map[string]uint64
	nparts int
	stats  Stats
	stop   chan struct{}
	done   chan struct{}
}

// New connects a Kafka producer and starts the flusher.
func New(o Options) (*Reporter, error) {
	if o.Topic == "" || len(o.Brokers) == 0 {
		return nil, errors.New("hotkeyd reporter: Brokers and Topic are required")
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 100 * time.Millisecond
	}
	if o.SendTimeout <= 0 {
		o.SendTimeout = 5 * time.Second
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 100_000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 256 << 10
	}
	opts := append([]kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.DefaultProduceTopic(o.Topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		// Idempotent writes (franz-go's default, kept on purpose): a request already sent
		// is never failed on a timeout, because the broker may have appended it; it is
		// retried with the same sequence numbers (the broker drops the duplicate) until
		// the broker answers. Without them a timed-out request that the broker appends
		// later plus the re-sent counts would be counted twice. A broker without
		// InitProducerID makes franz-go produce without a producer id.
		// Protocol versions up to Kafka 3.6 are all a producer of small messages needs,
		// and every broker we test speaks them (Apache Kafka 3.x/4.x, Tansu); pass
		// kgo.MaxVersions in KafkaOptions to change it.
		kgo.MaxVersions(kversion.V3_6_0()),
	}, o.KafkaOptions...)
	kc, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	r := &Reporter{o: o, kc: kc, counts: map[string]uint64{}, stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r, nil
}

// Record counts n accesses of key.
func (r *Reporter) Record(key string, n uint64) {
	atomic.AddInt64(&r.stats.Recorded, int64(n))
	r.mu.Lock()
	if c, ok := r.counts[key]; ok || len(r.counts) < r.o.MaxKeys {
		r.counts[key] = c + n
		r.mu.Unlock()
		return
	}
	r.mu.Unlock()
	atomic.AddInt64(&r.stats.Dropped, int64(n))
}

// Stats returns a copy of the counters.
func (r *Reporter) Stats() Stats {
	s := &r.stats
	return Stats{Recorded: atomic.LoadInt64(&s.Recorded), Sent: atomic.LoadInt64(&s.Sent),
		Messages: atomic.LoadInt64(&s.Messages), Dropped: atomic.LoadInt64(&s.Dropped),
		SendErrors: atomic.LoadInt64(&s.SendErrors), Requeued: atomic.LoadInt64(&s.Requeued)}
}

// Close sends what is buffered and closes the producer, waiting at most twice SendTimeout
// for a broker that does not answer. Counts that could not be sent (or whose delivery is
// unknown when it gives up) are counted in Stats().Dropped.
func (r *Reporter) Close() error {
	close(r.stop)
	select {
	case <-r.done:
	case <-time.After(2 * r.o.SendTimeout):
		// A flush still waits for a broker that does not answer: closing the client fails
		// its messages, and what they carried is counted as dropped (the broker may or
		// may not have appended them; it is never sent again).
	}
	r.kc.Close()
	<-r.done
	return nil
}

func (r *Reporter) loop() {
	defer close(r.done)
	t := time.NewTicker(r.o.FlushInterval)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			r.flush(true)
			return
		case <-t.C:
			r.flush(false)
		}
	}
}

func (r *Reporter) partitions(ctx context.Context) int {
	if r.nparts > 0 {
		return r.nparts
	}
	req := kmsgMetadata(r.o.Topic)
	resp, err := req.RequestWith(ctx, r.kc)
	if err != nil || len(resp.Topics) == 0 || resp.Topics[0].ErrorCode != 0 {
		return 0
	}
	r.nparts = len(resp.Topics[0].Partitions)
	return r.nparts
}

func (r *Reporter) flush(final bool) {
	r.mu.Lock()
	counts := r.counts
	r.counts = make(map[string]uint64, len(counts))
	r.mu.Unlock()
	if len(counts) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), r.o.SendTimeout)
	defer cancel()
	n := r.partitions(ctx)
	if n == 0 {
		r.putBack(counts, final)
		return
	}
	for k, c := range counts {
		if c > hotkeyd.MaxReportCount { // the daemon rejects larger counts: keep the key, cap the count
			atomic.AddInt64(&r.stats.Dropped, int64(c-hotkeyd.MaxReportCount))
			counts[k] = hotkeyd.MaxReportCount
		}
	}
	byPart := map[int][]hotkeyd.DemandCount{}
	for k, c := range counts {
		p := hotkeyd.PartitionFor([]byte(k), n)
		byPart[p] = append(byPart[p], hotkeyd.DemandCount{Key: hotkeyd.Key{Bytes: k}, N: c})
	}
	// Each message keeps the counts it carries until its produce result is known: a
	// delivered message's counts are sent, a failed message's counts (only those) are
	// merged back for the next flush, or dropped and counted when the failure is for
	// good. Re-sending a whole partition when one of its messages failed would count the
	// delivered messages' keys twice.
	var wg sync.WaitGroup
	var fmu sync.Mutex
	retry := map[string]uint64{}
	for p, items := range byPart {
		for _, m := range hotkeyd.EncodeCountMessages(items, r.o.MaxBytes) {
			wg.Add(1)
			r.kc.Produce(ctx, &kgo.Record{Partition: int32(p), Value: m.Value}, func(_ *kgo.Record, err error) {
				defer wg.Done()
				total := m.Total()
				if err == nil {
					atomic.AddInt64(&r.stats.Messages, 1)
					atomic.AddInt64(&r.stats.Sent, int64(total))
					return
				}
				atomic.AddInt64(&r.stats.SendErrors, 1)
				if final || permanent(err) {
					atomic.AddInt64(&r.stats.Dropped, int64(total))
					return
				}
				fmu.Lock()
				for _, it := range m.Items {
					retry[it.Key.Bytes] += it.N
				}
				fmu.Unlock()
			})
		}
	}
	wg.Wait()
	if len(retry) > 0 {
		var total uint64
		for _, c := range retry {
			total += c
		}
		atomic.AddInt64(&r.stats.Requeued, int64(total))
		r.putBack(retry, final)
	}
}

// permanent: a produce error that sending the same counts again cannot fix (a record
// over the broker's or the client's size limit, a non-retriable broker error such as an
// authorization failure). Timeouts, connection errors and retriable broker errors are not.
func permanent(err error) bool {
	if errors.Is(err, kerr.MessageTooLarge) {
		return true
	}
	var ke *kerr.Error
	return errors.As(err, &ke) && !ke.Retriable
}

// putBack merges unsent counts into the buffer (bounded), or drops them when closing.
func (r *Reporter) putBack(counts map[string]uint64, final bool) {
	if final {
		for _, c := range counts {
			atomic.AddInt64(&r.stats.Dropped, int64(c))
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, c := range counts {
		if old, ok := r.counts[k]; ok || len(r.counts) < r.o.MaxKeys {
			r.counts[k] = old + c
		} else {
			atomic.AddInt64(&r.stats.Dropped, int64(c))
		}
	}
}

func kmsgMetadata(topic string) *kmsg.MetadataRequest {
	req := kmsg.NewPtrMetadataRequest()
	t := kmsg.NewMetadataRequestTopic()
	t.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, t)
	return req
}
