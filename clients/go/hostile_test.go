package hotkeyd

// spec/vectors/hostile.json: huge and non-finite numbers, invalid UTF-8 and deep nesting
// get the same verdict as in every other language.

import (
	"bytes"
	"encoding/base64"
	"os"
	"strings"
	"testing"
	"time"
)

func TestConformanceHostile(t *testing.T) {
	var doc struct {
		MaxDepth int   `json:"max_depth"`
		MaxSeq   int64 `json:"max_seq"`
		Cases    []struct {
			Name        string `json:"name"`
			Decoder     string `json:"decoder"`
			Valid       bool   `json:"valid"`
			Input       *string
			InputBase64 *string `json:"input_base64"`
			Gen         *struct {
				Prefix, Open, Close, Suffix string
				Times                       int
			}
		}
	}
	loadVectors(t, "hostile.json", &doc)
	if doc.MaxDepth != MaxDepth || doc.MaxSeq != MaxSeq {
		t.Fatalf("limits: vectors %d/%d, code %d/%d", doc.MaxDepth, doc.MaxSeq, MaxDepth, MaxSeq)
	}
	ran := 0
	for _, c := range doc.Cases {
		var data []byte
		switch {
		case c.InputBase64 != nil:
			data, _ = base64.StdEncoding.DecodeString(*c.InputBase64)
		case c.Gen != nil:
			g := c.Gen
			data = []byte(g.Prefix + strings.Repeat(g.Open, g.Times) + strings.Repeat(g.Close, g.Times) + g.Suffix)
		default:
			data = []byte(*c.Input)
		}
		var err error
		switch c.Decoder {
		case "notification":
			_, _, err = DecodeMessage(data)
		case "invalidation":
			_, _, err = DecodeInvalidation(data)
		default:
			continue // the Go client sends demand reports, it does not read them
		}
		ran++
		if (err == nil) != c.Valid {
			t.Errorf("%s: valid=%v, got err=%v", c.Name, c.Valid, err)
		}
	}
	if ran == 0 {
		t.Fatal("no hostile vectors")
	}
}

func TestReporterKeyFromEnvSignsWhatTheDaemonVerifies(t *testing.T) {
	t.Setenv("HOTKEYD_DEMAND_KEY_FILE", "")
	t.Setenv("HOTKEYD_DEMAND_KEY", "")
	if ReporterKeyFromEnv() != nil {
		t.Fatal("a key without configuration")
	}
	path := t.TempDir() + "/demand.key"
	if err := os.WriteFile(path, []byte("reporter-key-0123456789\nold-key-0123456789xx\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOTKEYD_DEMAND_KEY_FILE", path)
	a := ReporterKeyFromEnv()
	if a == nil {
		t.Fatal("no reporter key from the file")
	}
	payload, _, _ := EncodeDemand("app", 1, 1, 250*time.Millisecond, []DemandCount{{Key: Key{Bytes: "k"}, N: 3}})
	signed, err := a.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	// the same MAC as the daemon's Python verifier computes (spec/vectors/auth.json pins it)
	want, _ := NewMessageAuth([]byte("reporter-key-0123456789"))
	if body, ok := want.Verify(signed); !ok || !bytes.Equal(body, payload) {
		t.Fatal("signed with the wrong key")
	}
}
