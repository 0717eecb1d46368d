package hotkeyd

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"unicode/utf8"
)

// linesSafe: keys with TAB, CR, LF, empty keys and keys starting with '{' travel as JSON.
func linesSafe(k string) bool {
	if k == "" || k[0] == '{' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c == '\t' || c == '\n' || c == '\r' {
			return false
		}
	}
	return true
}

// EncodeCounts encodes counts as reporter messages of about maxBytes at most, as the
// Python reporter does: counted lines, then JSON batches {"v":1,"keys":[[key,n],[b64,n,"b64"]]}.
func EncodeCounts(items []DemandCount, maxBytes int) [][]byte {
	msgs := encodeMessages(items, maxBytes)
	out := make([][]byte, len(msgs))
	for i, m := range msgs {
		out[i] = m.Value
	}
	return out
}

// CountMessage is one reporter message and the counts it carries (what a failed send must
// put back, and only that).
type CountMessage struct {
	Value []byte
	Items []DemandCount
}

// Total is the number of accesses the message carries.
func (m CountMessage) Total() uint64 {
	var t uint64
	for _, it := range m.Items {
		t += it.N
	}
	return t
}

// EncodeCountMessages is EncodeCounts with each message's counts: the Kafka reporter
// (package reporter) re-queues exactly the counts of a message that failed.
func EncodeCountMessages(items []DemandCount, maxBytes int) []CountMessage {
	return encodeMessages(items, maxBytes)
}

func encodeMessages(items []DemandCount, maxBytes int) []CountMessage {
	var out []CountMessage
	var lines bytes.Buffer
	var lineItems, oddItems []DemandCount
	var odd []any
	oddSize := 0
	for _, it := range items {
		n := it.N
		if n > MaxReportCount {
			n = MaxReportCount
		}
		k := it.Key.Bytes
		if linesSafe(k) {
			line := k + "\t" + strconv.FormatUint(n, 10) + "\n"
			if lines.Len()+len(line) > maxBytes && lines.Len() > 0 {
				out = append(out, CountMessage{bytes.Clone(lines.Bytes()), lineItems})
				lines.Reset()
				lineItems = nil
			}
			lines.WriteString(line)
			lineItems = append(lineItems, DemandCount{Key: it.Key, N: n})
			continue
		}
		est := len(k)*2 + 24
		if oddSize+est > maxBytes && len(odd) > 0 {
			out = append(out, CountMessage{marshal(map[string]any{"v": 1, "keys": odd}), oddItems})
			odd, oddItems, oddSize = nil, nil, 0
		}
		if utf8.ValidString(k) {
			odd = append(odd, []any{k, n})
		} else {
			odd = append(odd, []any{base64.StdEncoding.EncodeToString([]byte(k)), n, "b64"})
		}
		oddItems = append(oddItems, DemandCount{Key: it.Key, N: n})
		oddSize += est
	}
	if lines.Len() > 0 {
		out = append(out, CountMessage{bytes.Clone(lines.Bytes()), lineItems})
	}
	if len(odd) > 0 {
		out = append(out, CountMessage{marshal(map[string]any{"v": 1, "keys": odd}), oddItems})
	}
	return out
}
