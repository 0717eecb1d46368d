package hotkeyd

// spec/vectors/hostile.json: huge and non-finite numbers, invalid UTF-8 and deep nesting
// get the same verdict as in every other language.

import (
	"encoding/base64"
	"strings"
	"testing"
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
