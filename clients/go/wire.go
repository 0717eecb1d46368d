package hotkeyd

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// WireVersion is the only notification version this client speaks.
const WireVersion = 1

// ErrWire is wrapped by every error about a message that does not follow the wire format.
var ErrWire = errors.New("hotkeyd: bad wire message")

func wireErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", ErrWire, fmt.Sprintf(format, a...))
}

// Namespace holds the Redis names of one hotkeyd deployment (prefix "hotkeyd" by default).
// Keys carry the prefix as a Cluster hash tag, so one daemon's snapshot and the instance
// registry share a slot; channels are not keys and carry the plain prefix.
type Namespace struct {
	Prefix  string // default "hotkeyd"
	Channel string // overrides the events channel when set
}

func (n Namespace) prefix() string {
	if n.Prefix == "" {
		return "hotkeyd"
	}
	return n.Prefix
}

// EventsChannel is where daemons publish hot/cool notifications.
func (n Namespace) EventsChannel() string {
	if n.Channel != "" {
		return n.Channel
	}
	return n.prefix() + ":events"
}

// InvalidateChannel is where caches broadcast the keys they wrote.
func (n Namespace) InvalidateChannel() string { return n.prefix() + ":invalidate" }

// WatchChannel carries the heartbeat of the daemon's watch of each data node (every 100 ms).
func (n Namespace) WatchChannel() string { return n.prefix() + ":watch" }

// DemandChannel is where apps report locally served reads to daemon instance.
func (n Namespace) DemandChannel(instance string) string {
	return n.prefix() + ":demand:" + instance
}

// Instances is the sorted set of live daemon instances, scored by heartbeat.
func (n Namespace) Instances() string { return "{" + n.prefix() + "}:instances" }

// Snapshot is the key holding instance's whole hot set.
func (n Namespace) Snapshot(instance string) string {
	return "{" + n.prefix() + "}:snapshot:" + instance
}

// Key is a Redis key as hotkeyd identifies it: its bytes and its logical database.
type Key struct {
	Bytes string // raw key bytes (a Go string may hold any bytes)
	DB    int
}

// HotEntry is a key that turned hot (or is re-announced as still hot).
type HotEntry struct {
	Key   []byte
	DB    int
	Rate  float64
	Rule  string
	TTLms int64
	Since float64
	Kind  string
}

// CoolEntry is a key that stopped being hot.
type CoolEntry struct {
	Key  []byte
	DB   int
	Rule string
}

// Message is one notification on the events channel, or one snapshot (Full is then true).
type Message struct {
	Instance string
	Seq      int64
	TS       float64
	Full     bool
	Final    bool
	Hot      []HotEntry
	Cool     []CoolEntry
}

// EncodeKey returns the JSON fields of a key: text when it is valid UTF-8, base64 with
// "enc":"base64" otherwise.
func EncodeKey(key []byte) map[string]any {
	if utf8.Valid(key) {
		return map[string]any{"key": string(key)}
	}
	return map[string]any{"key": base64.StdEncoding.EncodeToString(key), "enc": "base64"}
}

// DecodeKey is the inverse of EncodeKey.
func DecodeKey(key string, enc string) ([]byte, error) {
	switch enc {
	case "", "utf-8":
		return []byte(key), nil
	case "base64":
		b, err := base64.StdEncoding.Strict().DecodeString(key)
		if err != nil {
			return nil, wireErr("invalid base64 key: %v", err)
		}
		return b, nil
	}
	return nil, wireErr("unknown key encoding %q", enc)
}

// DecodeMessage parses and validates a notification or a snapshot. Whatever the bytes,
// it returns a message or an error wrapping ErrWire, never panics. The envelope must be
// valid; a bad entry is left out and counted in skipped, as are entries beyond
// MaxEntries.
func DecodeMessage(data []byte) (msg Message, skipped int, err error) {
	obj, err := decodeStrict(data)
	if err != nil || obj == nil {
		return msg, 0, wireErr("notification rejected: %v", err)
	}
	if v, ok := obj["v"].(json.Number); !ok || v.String() != "1" {
		return msg, 0, wireErr("unsupported wire version")
	}
	inst, ok := obj["instance"].(string)
	if !ok || inst == "" || utf8.RuneCountInString(inst) > maxName {
		return msg, 0, wireErr("instance must be a non-empty string of at most %d characters", maxName)
	}
	seq, err := intField(obj, "seq", 0, MaxSeq, nil)
	if err != nil {
		return msg, 0, err
	}
	ts, err := numField(obj, "ts", nil)
	if err != nil {
		return msg, 0, err
	}
	msg.Instance, msg.Seq, msg.TS = inst, seq, ts
	for name, dst := range map[string]*bool{"full": &msg.Full, "final": &msg.Final} {
		if v, present := obj[name]; present {
			b, ok := v.(bool)
			if !ok {
				return msg, 0, wireErr("full and final must be true or false")
			}
			*dst = b
		}
	}
	lists := [3][]any{}
	for i, name := range []string{"hot", "cool", "top"} {
		if v, present := obj[name]; present {
			l, ok := v.([]any)
			if !ok {
				return msg, 0, wireErr("hot, cool and top must be lists")
			}
			lists[i] = l
		}
	}
	hot, cool, top := lists[0], lists[1], lists[2]
	if len(hot)+len(cool) > MaxEntries {
		skipped = len(hot) + len(cool) - MaxEntries
		if len(hot) > MaxEntries {
			hot = hot[:MaxEntries]
		}
		cool = cool[:MaxEntries-len(hot)]
	}
	for _, h := range hot {
		e, err := hotEntry(h)
		if err != nil {
			skipped++
			continue
		}
		msg.Hot = append(msg.Hot, e)
	}
	for _, c := range cool {
		e, err := coolEntry(c)
		if err != nil {
			skipped++
			continue
		}
		msg.Cool = append(msg.Cool, e)
	}
	for _, t := range top {
		if _, ok := t.(map[string]any); !ok {
			skipped++
		}
	}
	return msg, skipped, nil
}

func intField(o map[string]any, name string, lo, hi int64, def *int64) (int64, error) {
	v, present := o[name]
	if !present && def != nil {
		return *def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, wireErr("%s must be an integer in [%d, %d]", name, lo, hi)
	}
	i, err := strconv.ParseInt(n.String(), 10, 64) // "5.0" and "1e3" are not integers here
	if err != nil || i < lo || i > hi {
		return 0, wireErr("%s must be an integer in [%d, %d]", name, lo, hi)
	}
	return i, nil
}

func numField(o map[string]any, name string, def *float64) (float64, error) {
	v, present := o[name]
	if !present && def != nil {
		return *def, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, wireErr("%s must be a finite number >= 0", name)
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) || f < 0 {
		return 0, wireErr("%s must be a finite number >= 0", name)
	}
	return f, nil
}

func nameField(o map[string]any, name string, def *string) (string, error) {
	v, present := o[name]
	if !present && def != nil {
		return *def, nil
	}
	s, ok := v.(string)
	if !ok || utf8.RuneCountInString(s) > maxName {
		return "", wireErr("%s must be a string of at most %d characters", name, maxName)
	}
	return s, nil
}

func entryKey(o map[string]any) ([]byte, int, error) {
	key, ok := o["key"].(string)
	if !ok {
		return nil, 0, wireErr("entry has no string 'key'")
	}
	enc := ""
	if e, present := o["enc"]; present && e != nil {
		if enc, ok = e.(string); !ok {
			return nil, 0, wireErr("enc must be a string")
		}
	}
	k, err := DecodeKey(key, enc)
	if err != nil {
		return nil, 0, err
	}
	zero := int64(0)
	db, err := intField(o, "db", 0, maxDB, &zero)
	return k, int(db), err
}

func hotEntry(v any) (HotEntry, error) {
	o, ok := v.(map[string]any)
	if !ok {
		return HotEntry{}, wireErr("hot entry is not an object")
	}
	var e HotEntry
	switch k := o["kind"].(type) {
	case nil:
	case string:
		if k != "read" && k != "write" && k != "mixed" {
			return e, wireErr("kind must be read, write or mixed")
		}
		e.Kind = k
	default:
		return e, wireErr("kind must be read, write or mixed")
	}
	var err error
	zero := 0.0
	if e.Key, e.DB, err = entryKey(o); err != nil {
		return e, err
	}
	if e.Rate, err = numField(o, "rate", nil); err != nil {
		return e, err
	}
	if e.Rule, err = nameField(o, "rule", nil); err != nil {
		return e, err
	}
	if e.TTLms, err = intField(o, "ttl_ms", 0, MaxTTLms, nil); err != nil {
		return e, err
	}
	if e.Since, err = numField(o, "since", &zero); err != nil {
		return e, err
	}
	return e, nil
}

func coolEntry(v any) (CoolEntry, error) {
	o, ok := v.(map[string]any)
	if !ok {
		return CoolEntry{}, wireErr("cool entry is not an object")
	}
	var e CoolEntry
	var err error
	empty := ""
	if e.Key, e.DB, err = entryKey(o); err != nil {
		return e, err
	}
	e.Rule, err = nameField(o, "rule", &empty)
	return e, err
}

// EncodeInvalidation is the payload a cache publishes for the keys it wrote.
func EncodeInvalidation(origin string, keys [][]byte) []byte {
	ks := make([]map[string]any, len(keys))
	for i, k := range keys {
		ks[i] = EncodeKey(k)
	}
	return marshal(map[string]any{"v": 1, "origin": origin, "keys": ks})
}

// DecodeInvalidation returns the origin and keys of an invalidation payload.
func DecodeInvalidation(data []byte) (string, [][]byte, error) {
	obj, err := decodeStrict(data)
	if err != nil || obj == nil {
		return "", nil, wireErr("invalidation rejected: %v", err)
	}
	list, ok := obj["keys"].([]any)
	if v, vok := obj["v"].(json.Number); !vok || v.String() != "1" || !ok {
		return "", nil, wireErr("invalidation is not a v1 object with a 'keys' list")
	}
	keys := make([][]byte, 0, len(list))
	for _, e := range list {
		o, ok := e.(map[string]any)
		if !ok {
			return "", nil, wireErr("bad key entry")
		}
		k, _, err := entryKey(o)
		if err != nil {
			return "", nil, err
		}
		keys = append(keys, k)
	}
	origin, _ := obj["origin"].(string)
	return origin, keys, nil
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}

// decodeStrict parses a JSON object by the rule every decoder of the contract follows
// (spec/vectors/hostile.json): invalid UTF-8, an integer outside int64, a number not
// finite as a float64, nesting deeper than MaxDepth or trailing data reject it whole.
func decodeStrict(data []byte) (map[string]any, error) {
	if !utf8.Valid(data) {
		return nil, errors.New("not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("not JSON")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("extra data after the JSON value")
	}
	if err := checkStrict(v, 1); err != nil {
		return nil, err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return obj, nil
}

func checkStrict(v any, depth int) error {
	switch x := v.(type) {
	case json.Number:
		s := x.String()
		if !strings.ContainsAny(s, ".eE") {
			if _, err := strconv.ParseInt(s, 10, 64); err != nil {
				return errors.New("integer outside the signed 64-bit range")
			}
			return nil
		}
		if f, err := strconv.ParseFloat(s, 64); err != nil || math.IsInf(f, 0) {
			return errors.New("number not finite")
		}
	case map[string]any:
		if depth > MaxDepth {
			return errors.New("nested too deep")
		}
		for _, c := range x {
			if err := checkStrict(c, depth+1); err != nil {
				return err
			}
		}
	case []any:
		if depth > MaxDepth {
			return errors.New("nested too deep")
		}
		for _, c := range x {
			if err := checkStrict(c, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
