package hotkeyd

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// The limits of the contract live once, in the repository's spec/limits.json; limits.json
// here is its copy for go:embed (go generate refreshes it, TestLimitsCopyIsTheSpec keeps
// it identical), so the package never writes one of those numbers down itself.
//
//go:generate cp ../../spec/limits.json limits.json
//go:embed limits.json
var limitsJSON []byte

// The limits, read from spec/limits.json at init (see each name there for its meaning).
var (
	// MaxSeq is the largest seq on the wire (seq_max).
	MaxSeq int64
	// MaxTTLms is the largest ttl_ms on the wire (ttl_ms_max).
	MaxTTLms int64
	// MaxEntries bounds the entries of one message; more are left out and counted
	// (message_entries_max).
	MaxEntries int
	// MaxDemandEntries bounds one demand report; the heaviest keys are kept
	// (demand_entries_max).
	MaxDemandEntries int
	// MaxDemandBytes bounds one demand report's size: receivers drop a larger one whole,
	// so the sender halves its entries (heaviest kept) until it fits
	// (demand_report_bytes_max).
	MaxDemandBytes int
	// MaxReportCount caps one key's count in one reporter message or demand entry: the
	// daemon rejects larger counts (count_max).
	MaxReportCount uint64
	// MaxDepth is the deepest nesting of arrays and objects a document may have (the
	// top-level object is 1); a deeper one is rejected whole (json_depth_max).
	MaxDepth int
	// MinAuthKeyBytes is the shortest signing key accepted (auth_key_bytes_min).
	MinAuthKeyBytes int
	// DefaultStartTimeout bounds Start when the app sets no StartTimeout
	// (start_timeout_ms; spec/failure.md).
	DefaultStartTimeout time.Duration

	maxName                                      int
	maxDB                                        int64
	maxMessageBytes                              int
	maxClockSkew, staleAfter, forgetIdle, maxTTL time.Duration
	maxSeqJump                                   int64
	maxHotKeys, maxKeysPerInstance, maxInstances int
	minReportInterval                            time.Duration
	watchLease, invalidationKeyInterval          time.Duration
	maxInvalidationBytes, maxInvalidationKeys    int
)

func init() {
	l, err := parseLimits(limitsJSON)
	if err != nil {
		panic(err)
	}
	l.apply()
}

// limitSet is spec/limits.json parsed: name -> value.
type limitSet map[string]json.Number

func parseLimits(raw []byte) (limitSet, error) {
	var doc struct {
		Limits map[string]struct {
			Value json.Number `json:"value"`
		} `json:"limits"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("hotkeyd: limits.json: %w", err)
	}
	out := limitSet{}
	for name, l := range doc.Limits {
		if _, err := strconv.ParseInt(l.Value.String(), 10, 64); err != nil {
			return nil, fmt.Errorf("hotkeyd: limits.json: %s: value %q is not a 64-bit integer", name, l.Value)
		}
		out[name] = l.Value
	}
	return out, nil
}

func (l limitSet) int(name string) int64 {
	v, ok := l[name]
	if !ok {
		panic("hotkeyd: limits.json has no limit " + name)
	}
	n, _ := strconv.ParseInt(v.String(), 10, 64)
	return n
}

func (l limitSet) ms(name string) time.Duration { return time.Duration(l.int(name)) * time.Millisecond }
func (l limitSet) s(name string) time.Duration  { return time.Duration(l.int(name)) * time.Second }

// apply sets the package's limits (at init; a test applies a changed copy).
func (l limitSet) apply() {
	MaxSeq = l.int("seq_max")
	MaxTTLms = l.int("ttl_ms_max")
	MaxEntries = int(l.int("message_entries_max"))
	MaxDemandEntries = int(l.int("demand_entries_max"))
	MaxDemandBytes = int(l.int("demand_report_bytes_max")) - sigSuffixLen // room for the reporter key's signature
	MaxReportCount = uint64(l.int("count_max"))
	MinAuthKeyBytes = int(l.int("auth_key_bytes_min"))
	MaxDepth = int(l.int("json_depth_max"))
	maxName = int(l.int("name_chars_max"))
	maxDB = l.int("db_max")
	maxMessageBytes = int(l.int("message_bytes_max"))
	maxClockSkew = l.s("clock_skew_s_max")
	staleAfter = l.s("instance_max_age_s")
	forgetIdle = l.s("hotset_forget_idle_s")
	maxTTL = l.ms("hotset_ttl_ms_max")
	maxSeqJump = l.int("seq_jump_max")
	maxHotKeys = int(l.int("hotset_keys_max"))
	maxKeysPerInstance = int(l.int("hotset_keys_per_instance_max"))
	maxInstances = int(l.int("hotset_instances_max"))
	minReportInterval = l.ms("demand_report_interval_ms_min")
	DefaultStartTimeout = l.ms("start_timeout_ms")
	watchLease = l.ms("watch_lease_ms")
	invalidationKeyInterval = l.ms("invalidation_key_interval_ms")
	maxInvalidationBytes = int(l.int("invalidation_bytes_max"))
	maxInvalidationKeys = int(l.int("invalidation_keys_max"))
}
