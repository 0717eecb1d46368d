package io.hotkeyd;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * Key to bytes, the one rule every hotkeyd client follows (it mirrors what redis-py sends):
 * {@code byte[]} as is; text as strict UTF-8; integers as decimal ASCII; floating point as
 * Python's {@code repr}; anything else (booleans included) is refused.
 */
public final class Keys {
  private Keys() {}

  /**
   * The bytes of {@code key}.
   *
   * @throws IllegalArgumentException for an unsupported type, or text that is not valid
   *     Unicode (a lone surrogate)
   */
  public static byte[] toBytes(Object key) {
    if (key instanceof byte[] b) {
      return b;
    }
    if (key instanceof String s) {
      return utf8(s);
    }
    if (key instanceof Integer || key instanceof Long || key instanceof Short
        || key instanceof Byte || key instanceof BigInteger) {
      return key.toString().getBytes(StandardCharsets.US_ASCII);
    }
    if (key instanceof Double || key instanceof Float) {
      return pythonRepr(((Number) key).doubleValue()).getBytes(StandardCharsets.US_ASCII);
    }
    if (key instanceof ByteBuffer bb) {
      byte[] out = new byte[bb.remaining()];
      bb.duplicate().get(out);
      return out;
    }
    String type = key == null ? "null" : key.getClass().getSimpleName();
    throw new IllegalArgumentException(
        "a Redis key must be byte[], String, an integer or a float, not " + type);
  }

  /** Strict UTF-8 (a lone surrogate is an error, never a silent '?'). */
  public static byte[] utf8(String s) {
    // Fast path: pure ASCII/BMP text without surrogates encodes the same either way.
    boolean simple = true;
    for (int i = 0, n = s.length(); i < n; i++) {
      if (Character.isSurrogate(s.charAt(i))) {
        simple = false;
        break;
      }
    }
    if (simple) {
      return s.getBytes(StandardCharsets.UTF_8);
    }
    try {
      ByteBuffer bb =
          StandardCharsets.UTF_8
              .newEncoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .encode(CharBuffer.wrap(s));
      return Arrays.copyOf(bb.array(), bb.limit());
    } catch (CharacterCodingException e) {
      throw new IllegalArgumentException("key text is not valid Unicode (lone surrogate)", e);
    }
  }

  /** Python's {@code repr(float)}: shortest round-trip digits, exponent outside [1e-4, 1e16). */
  static String pythonRepr(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    if (d == 0) {
      return (1 / d < 0) ? "-0.0" : "0.0";
    }
    // Double.toString gives the shortest digits on modern JDKs; BigDecimal splits them.
    BigDecimal bd = new BigDecimal(Double.toString(d)).stripTrailingZeros();
    String digits = bd.unscaledValue().abs().toString();
    int exp = digits.length() - 1 - bd.scale(); // decimal exponent of the first digit
    String sign = d < 0 ? "-" : "";
    if (exp < -4 || exp >= 16) {
      String mant = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
      String es = (exp < 0 ? "-" : "+") + (Math.abs(exp) < 10 ? "0" : "") + Math.abs(exp);
      return sign + mant + "e" + es;
    }
    String plain;
    if (exp < 0) {
      plain = "0." + "0".repeat(-exp - 1) + digits;
    } else if (digits.length() <= exp + 1) {
      plain = digits + "0".repeat(exp + 1 - digits.length()) + ".0";
    } else {
      plain = digits.substring(0, exp + 1) + "." + digits.substring(exp + 1);
    }
    return sign + plain;
  }
}
