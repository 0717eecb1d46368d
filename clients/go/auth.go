package hotkeyd

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// Message authentication v1 (docs/wire-format.md, "Signed messages"): the daemon appends
// ,"sig":"<hex HMAC-SHA256(key, body)>" to each message and snapshot; clients configured
// with the key read only what verifies. No JSON canonicalization: the MAC covers the
// exact bytes, so every language agrees byte for byte.

// AuthEnvVar holds one shared key for MessageAuthFromEnv.
const AuthEnvVar = "HOTKEYD_AUTH_KEY"

var sigHead = []byte(`,"sig":"`)

const sigSuffixLen = 8 + 64 + 2 // ,"sig":"<64 hex>"}

// MessageAuth signs and verifies messages: the first key signs, every key verifies (put
// the new key first while rotating).
type MessageAuth struct{ keys [][]byte }

// NewMessageAuth checks the keys (at least one, each at least 16 bytes).
func NewMessageAuth(keys ...[]byte) (*MessageAuth, error) {
	if len(keys) == 0 {
		return nil, errors.New("hotkeyd: message authentication: no key given")
	}
	for _, k := range keys {
		if len(k) < MinAuthKeyBytes {
			return nil, fmt.Errorf("hotkeyd: message authentication: a key must have at least %d bytes", MinAuthKeyBytes)
		}
	}
	return &MessageAuth{keys: keys}, nil
}

// MessageAuthFromEnv reads HOTKEYD_AUTH_KEY; nil when it is unset or empty.
func MessageAuthFromEnv() (*MessageAuth, error) {
	v := os.Getenv(AuthEnvVar)
	if v == "" {
		return nil, nil
	}
	return NewMessageAuth([]byte(v))
}

func (a *MessageAuth) mac(key, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	out := make([]byte, 64)
	hex.Encode(out, m.Sum(nil))
	return out
}

// Sign appends the signature to body, a JSON object's bytes.
func (a *MessageAuth) Sign(body []byte) ([]byte, error) {
	if len(body) == 0 || body[len(body)-1] != '}' {
		return nil, errors.New("hotkeyd: only a JSON object can be signed")
	}
	out := append(append([]byte{}, body[:len(body)-1]...), sigHead...)
	out = append(out, a.mac(a.keys[0], body)...)
	return append(out, '"', '}'), nil
}

// Verify returns the unsigned body when signed carries a valid MAC under any key.
func (a *MessageAuth) Verify(signed []byte) ([]byte, bool) {
	n := len(signed)
	if n < sigSuffixLen+2 || !bytes.HasSuffix(signed, []byte(`"}`)) {
		return nil, false
	}
	start := n - sigSuffixLen
	if !bytes.Equal(signed[start:start+len(sigHead)], sigHead) {
		return nil, false
	}
	got := signed[start+len(sigHead) : n-2]
	body := append(append([]byte{}, signed[:start]...), '}')
	for _, k := range a.keys {
		if hmac.Equal(got, a.mac(k, body)) {
			return body, true
		}
	}
	return nil, false
}
