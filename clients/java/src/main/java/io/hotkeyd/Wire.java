package io.hotkeyd;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Base64;

/**
 * The wire format (version 1) shared by the daemon and every client: keys on the wire, and
 * JSON helpers. A key that is valid UTF-8 travels as JSON text; any other key as base64 with
 * {@code "enc":"base64"}.
 */
public final class Wire {
  public static final int VERSION = 1;

  /** Largest {@code seq}: 2^53-1, so every language holds it exactly. */
  public static final long MAX_SEQ = Limits.SEQ_MAX;

  /** Deepest nesting of arrays and objects a message may have (spec/vectors/hostile.json). */
  public static final int MAX_DEPTH = Limits.JSON_DEPTH_MAX;
  static final ObjectMapper JSON = new ObjectMapper();

  private Wire() {}

  /** Put {@code key} (and {@code enc} when needed) into {@code out}; returns {@code out}. */
  public static ObjectNode encodeKey(byte[] key, ObjectNode out) {
    String text = strictUtf8(key);
    if (text != null) {
      out.put("key", text);
    } else {
      out.put("key", Base64.getEncoder().encodeToString(key));
      out.put("enc", "base64");
    }
    return out;
  }

  public static ObjectNode encodeKey(byte[] key) {
    return encodeKey(key, JSON.createObjectNode());
  }

  /** The key bytes of a wire entry ({@code key}, optional {@code enc}). */
  public static byte[] decodeKey(JsonNode entry) {
    JsonNode key = entry == null ? null : entry.get("key");
    if (key == null || !key.isTextual()) {
      throw new WireException("entry has no string 'key'");
    }
    JsonNode enc = entry.get("enc");
    if (enc == null || enc.isNull() || "utf-8".equals(enc.asText())) {
      return key.asText().getBytes(StandardCharsets.UTF_8);
    }
    if ("base64".equals(enc.asText())) {
      String s = key.asText();
      if (s.length() % 4 != 0) {
        throw new WireException("invalid base64 key (length " + s.length() + ")");
      }
      try {
        return Base64.getDecoder().decode(s);
      } catch (IllegalArgumentException e) {
        throw new WireException("invalid base64 key: " + e.getMessage(), e);
      }
    }
    throw new WireException("unknown key encoding '" + enc.asText() + "'");
  }

  /** The text of {@code b} if it is valid UTF-8, else null. */
  static String strictUtf8(byte[] b) {
    boolean ascii = true;
    for (byte x : b) {
      if (x < 0) {
        ascii = false;
        break;
      }
    }
    if (ascii) {
      return new String(b, StandardCharsets.ISO_8859_1);
    }
    try {
      CharBuffer cb =
          StandardCharsets.UTF_8
              .newDecoder()
              .onMalformedInput(CodingErrorAction.REPORT)
              .onUnmappableCharacter(CodingErrorAction.REPORT)
              .decode(ByteBuffer.wrap(b));
      return cb.toString();
    } catch (CharacterCodingException e) {
      return null;
    }
  }

  static JsonNode parse(byte[] data, String what) {
    if (strictUtf8(data) == null) {
      throw new WireException(what + " is not UTF-8");
    }
    JsonNode node;
    try {
      node = JSON.readTree(data);
    } catch (IOException e) {
      throw new WireException(what + " is not JSON: " + e.getMessage(), e);
    }
    if (node == null || !node.isObject()) {
      throw new WireException(what + " is not a JSON object");
    }
    String bad = strict(node, 1);
    if (bad != null) {
      throw new WireException(what + " rejected: " + bad);
    }
    return node;
  }

  /**
   * The rule every decoder of the contract follows: an integer outside int64, a number not
   * finite as a double, or nesting deeper than {@link #MAX_DEPTH} rejects the document whole.
   */
  private static String strict(JsonNode node, int depth) {
    if (node.isContainerNode()) {
      if (depth > MAX_DEPTH) {
        return "nested deeper than " + MAX_DEPTH;
      }
      for (JsonNode child : node) {
        String bad = strict(child, depth + 1);
        if (bad != null) {
          return bad;
        }
      }
    } else if (node.isBigInteger() && !node.canConvertToLong()) {
      return "integer outside the signed 64-bit range";
    } else if (node.isFloatingPointNumber() && !Double.isFinite(node.doubleValue())) {
      return "number not finite";
    }
    return null;
  }

  static byte[] dumps(JsonNode node) {
    try {
      return JSON.writeValueAsBytes(node);
    } catch (JsonProcessingException e) {
      throw new HotkeydException("cannot serialize JSON", e);
    }
  }
}
