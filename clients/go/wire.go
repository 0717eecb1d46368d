package hotkeyd

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
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

type rawEntry struct {
	Key    *string  `json:"key"`
	Enc    *string  `json:"enc,omitempty"`
	DB     *int64   `json:"db,omitempty"`
	Rate   *float64 `json:"rate,omitempty"`
	Rule   *string  `json:"rule,omitempty"`
	TTLms  *float64 `json:"ttl_ms,omitempty"`
	Since  *float64 `json:"since,omitempty"`
	Kind   *string  `json:"kind,omitempty"`
	Number *float64 `json:"n,omitempty"`
}

type rawMessage struct {
	V        *int64          `json:"v"`
	Instance *string         `json:"instance"`
	Seq      *float64        `json:"seq"`
	TS       *float64        `json:"ts"`
	Full     *bool           `json:"full"`
	Final    *bool           `json:"final"`
	Hot      json.RawMessage `json:"hot"`
	Cool     json.RawMessage `json:"cool"`
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

func decodeEntryKey(e rawEntry) ([]byte, int, error) {
	if e.Key == nil {
		return nil, 0, wireErr("entry has no string 'key'")
	}
	enc := ""
	if e.Enc != nil {
		enc = *e.Enc
	}
	k, err := DecodeKey(*e.Key, enc)
	if err != nil {
		return nil, 0, err
	}
	db := 0
	if e.DB != nil {
		if *e.DB < 0 || *e.DB > 1<<20 {
			return nil, 0, wireErr("db %d out of range", *e.DB)
		}
		db = int(*e.DB)
	}
	return k, db, nil
}

// maxSafeSeq bounds sequence numbers to what every language represents exactly.
const maxSafeSeq = 1<<53 - 1

// DecodeMessage parses a notification or a snapshot. Entries that are malformed are
// skipped and counted in the returned badEntries; a message whose envelope is malformed
// is an error wrapping ErrWire.
func DecodeMessage(data []byte) (msg Message, badEntries int, err error) {
	var raw rawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&raw); err != nil {
		return msg, 0, wireErr("not a JSON object: %v", err)
	}
	if raw.V == nil || *raw.V != WireVersion {
		return msg, 0, wireErr("unsupported wire version")
	}
	if raw.Instance == nil || *raw.Instance == "" || raw.Seq == nil || raw.TS == nil {
		return msg, 0, wireErr("missing instance, seq or ts")
	}
	seq := *raw.Seq
	if seq != float64(int64(seq)) || seq < 0 || seq > maxSafeSeq {
		return msg, 0, wireErr("seq %v is not a non-negative integer below 2^53", seq)
	}
	msg.Instance, msg.Seq, msg.TS = *raw.Instance, int64(seq), *raw.TS
	if raw.Full != nil {
		msg.Full = *raw.Full
	}
	if raw.Final != nil {
		msg.Final = *raw.Final
	}
	var hot, cool []json.RawMessage
	if len(raw.Hot) > 0 && string(raw.Hot) != "null" {
		if err := json.Unmarshal(raw.Hot, &hot); err != nil {
			return msg, 0, wireErr("'hot' is not a list")
		}
	}
	if len(raw.Cool) > 0 && string(raw.Cool) != "null" {
		if err := json.Unmarshal(raw.Cool, &cool); err != nil {
			return msg, 0, wireErr("'cool' is not a list")
		}
	}
	for _, h := range hot {
		var e rawEntry
		if json.Unmarshal(h, &e) != nil || e.Rate == nil || e.Rule == nil || e.TTLms == nil {
			badEntries++
			continue
		}
		k, db, kerr := decodeEntryKey(e)
		ttl := *e.TTLms
		if kerr != nil || ttl < 0 || ttl != float64(int64(ttl)) {
			badEntries++
			continue
		}
		he := HotEntry{Key: k, DB: db, Rate: *e.Rate, Rule: *e.Rule, TTLms: int64(ttl)}
		if e.Since != nil {
			he.Since = *e.Since
		}
		if e.Kind != nil {
			he.Kind = *e.Kind
		}
		msg.Hot = append(msg.Hot, he)
	}
	for _, c := range cool {
		var e rawEntry
		if json.Unmarshal(c, &e) != nil {
			badEntries++
			continue
		}
		k, db, kerr := decodeEntryKey(e)
		if kerr != nil {
			badEntries++
			continue
		}
		ce := CoolEntry{Key: k, DB: db}
		if e.Rule != nil {
			ce.Rule = *e.Rule
		}
		msg.Cool = append(msg.Cool, ce)
	}
	return msg, badEntries, nil
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
	var raw struct {
		V      *int64     `json:"v"`
		Origin string     `json:"origin"`
		Keys   []rawEntry `json:"keys"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return "", nil, wireErr("invalidation is not JSON: %v", err)
	}
	if raw.V == nil || *raw.V != 1 || raw.Keys == nil {
		return "", nil, wireErr("invalidation is not a v1 object with a 'keys' list")
	}
	keys := make([][]byte, 0, len(raw.Keys))
	for _, e := range raw.Keys {
		k, _, err := decodeEntryKey(e)
		if err != nil {
			return "", nil, err
		}
		keys = append(keys, k)
	}
	return raw.Origin, keys, nil
}

func marshal(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimRight(buf.Bytes(), "\n")
}
