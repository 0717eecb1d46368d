package io.hotkeyd.idempotency;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * A buffered HTTP response as every hotkeyd middleware stores it: status and headers as
 * one JSON line ({@code {"s":201,"h":[["content-type","application/json"]]}}), a newline,
 * then the body bytes as they were. So a response stored by the Go middleware replays
 * here, and the other way round.
 */
public record StoredResponse(int status, List<Map.Entry<String, String>> headers, byte[] body) {
  private static final ObjectMapper JSON = new ObjectMapper();

  public byte[] encode() {
    ObjectNode head = JSON.createObjectNode();
    head.put("s", status);
    ArrayNode h = head.putArray("h");
    for (Map.Entry<String, String> e : headers) {
      h.addArray().add(e.getKey()).add(e.getValue());
    }
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try {
      out.write(JSON.writeValueAsBytes(head));
      out.write('\n');
      out.write(body);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    return out.toByteArray();
  }

  public static StoredResponse decode(byte[] raw) {
    int nl = 0;
    while (nl < raw.length && raw[nl] != '\n') {
      nl++;
    }
    try {
      JsonNode head = JSON.readTree(new String(raw, 0, nl, StandardCharsets.ISO_8859_1));
      List<Map.Entry<String, String>> h = new ArrayList<>();
      for (JsonNode kv : head.get("h")) {
        h.add(Map.entry(kv.get(0).asText(), kv.get(1).asText()));
      }
      byte[] body = nl < raw.length ? Arrays.copyOfRange(raw, nl + 1, raw.length) : new byte[0];
      return new StoredResponse(head.get("s").asInt(), h, body);
    } catch (IOException | RuntimeException e) {
      throw new IdempotencyException("the stored response is not readable", e);
    }
  }

  /** The type of the middleware's problem responses: the docs' section. */
  public static final String PROBLEM_TYPE =
      "docs/idempotency.md#http-idempotency-key-middleware";

  private static final Map<Integer, String> TITLES = Map.of(400, "Bad Request", 409, "Conflict",
      413, "Content Too Large", 422, "Unprocessable Content", 500, "Internal Server Error",
      503, "Service Unavailable");

  /**
   * An RFC 9457 problem ({@code application/problem+json}) whose type links the docs;
   * retryAfterSeconds below 0: no Retry-After, else at least 1.
   */
  public static StoredResponse error(int status, String message, long retryAfterSeconds) {
    byte[] body;
    try {
      Map<String, Object> problem = new java.util.LinkedHashMap<>();
      problem.put("type", PROBLEM_TYPE);
      problem.put("title", TITLES.getOrDefault(status, "Error"));
      problem.put("status", status);
      problem.put("detail", message);
      body = JSON.writeValueAsBytes(problem);
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    List<Map.Entry<String, String>> h = new ArrayList<>(List.of(
        Map.entry("content-type", "application/problem+json"),
        Map.entry("content-length", Integer.toString(body.length))));
    if (retryAfterSeconds >= 0) {
      h.add(Map.entry("retry-after", Long.toString(Math.max(1, retryAfterSeconds))));
    }
    return new StoredResponse(status, h, body);
  }
}
