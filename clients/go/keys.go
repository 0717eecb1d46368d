package hotkeyd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// KeyBytes turns a key into the bytes Redis stores, with the rule every hotkeyd client
// shares: []byte as is, string as its UTF-8 bytes, integers in decimal, floats as
// Python's repr (shortest round-trip digits; "1.0", "1e+16"). Anything else is an error,
// so a key never maps to different bytes in different languages.
func KeyBytes(key any) ([]byte, error) {
	switch k := key.(type) {
	case []byte:
		return k, nil
	case string:
		return []byte(k), nil
	case int:
		return strconv.AppendInt(nil, int64(k), 10), nil
	case int8:
		return strconv.AppendInt(nil, int64(k), 10), nil
	case int16:
		return strconv.AppendInt(nil, int64(k), 10), nil
	case int32:
		return strconv.AppendInt(nil, int64(k), 10), nil
	case int64:
		return strconv.AppendInt(nil, k, 10), nil
	case uint:
		return strconv.AppendUint(nil, uint64(k), 10), nil
	case uint8:
		return strconv.AppendUint(nil, uint64(k), 10), nil
	case uint16:
		return strconv.AppendUint(nil, uint64(k), 10), nil
	case uint32:
		return strconv.AppendUint(nil, uint64(k), 10), nil
	case uint64:
		return strconv.AppendUint(nil, k, 10), nil
	case float64:
		return []byte(PyFloatRepr(k)), nil
	case float32:
		return []byte(PyFloatRepr(float64(k))), nil
	default:
		return nil, fmt.Errorf("hotkeyd: a key must be []byte, string, an integer or a float, not %T", key)
	}
}

// PyFloatRepr formats f exactly as Python's repr(float) does: the shortest digits that
// round-trip, positional notation for decimal exponents in [-4, 16), scientific otherwise,
// and always a ".0" on integral positional values.
func PyFloatRepr(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	// Shortest round-trip digits and the decimal exponent, from Go's 'e' formatting.
	s := strconv.FormatFloat(f, 'e', -1, 64) // e.g. "-1.2345e+06"
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	digits := strings.Replace(mant, ".", "", 1)
	var out string
	if exp >= -4 && exp < 16 {
		if exp >= 0 {
			if len(digits) <= exp+1 {
				out = digits + strings.Repeat("0", exp+1-len(digits)) + ".0"
			} else {
				out = digits[:exp+1] + "." + digits[exp+1:]
			}
		} else {
			out = "0." + strings.Repeat("0", -exp-1) + digits
		}
	} else {
		m := digits[:1]
		if len(digits) > 1 {
			m += "." + digits[1:]
		}
		sign := "+"
		if exp < 0 {
			sign = "-"
			exp = -exp
		}
		out = fmt.Sprintf("%se%s%02d", m, sign, exp)
	}
	if neg {
		return "-" + out
	}
	return out
}
