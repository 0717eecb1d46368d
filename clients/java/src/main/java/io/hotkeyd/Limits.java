package io.hotkeyd;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;

/**
 * The limits of the contract, read from {@code spec/limits.json} (Maven copies it into the
 * jar as {@code io/hotkeyd/limits.json}), so no cap is written down in this client. See that
 * file for what each limit means.
 */
public final class Limits {
  private static final JsonNode LIMITS = load();

  /** Largest seq on the wire ({@code seq_max}). */
  public static final long SEQ_MAX = get("seq_max");
  /** A seq further ahead than this is a gap, and suspect after the resync ({@code seq_jump_max}). */
  public static final long SEQ_JUMP_MAX = get("seq_jump_max");
  /** Largest ttl_ms on the wire ({@code ttl_ms_max}). */
  public static final long TTL_MS_MAX = get("ttl_ms_max");
  /** Longest instance, rule and app name ({@code name_chars_max}). */
  public static final int NAME_CHARS_MAX = (int) get("name_chars_max");
  /** Deepest nesting of one document; deeper is rejected whole ({@code json_depth_max}). */
  public static final int JSON_DEPTH_MAX = (int) get("json_depth_max");
  /** Largest db index on the wire ({@code db_max}). */
  public static final int DB_MAX = (int) get("db_max");
  /** Entries of one message; more are left out and counted ({@code message_entries_max}). */
  public static final int MESSAGE_ENTRIES_MAX = (int) get("message_entries_max");
  /** Larger messages are dropped unparsed ({@code message_bytes_max}). */
  public static final int MESSAGE_BYTES_MAX = (int) get("message_bytes_max");
  /** A ts further ahead of the wall clock (s) is suspect ({@code clock_skew_s_max}). */
  public static final long CLOCK_SKEW_S_MAX = get("clock_skew_s_max");
  /** Instances silent for longer (s) are gone ({@code instance_max_age_s}). */
  public static final long INSTANCE_MAX_AGE_S = get("instance_max_age_s");
  /** Default cap of one announcement in the hot set ({@code hotset_ttl_ms_max}). */
  public static final long HOTSET_TTL_MS_MAX = get("hotset_ttl_ms_max");
  /** Default bound of the hot set ({@code hotset_keys_max}). */
  public static final int HOTSET_KEYS_MAX = (int) get("hotset_keys_max");
  /** Default bound of one instance's keys ({@code hotset_keys_per_instance_max}). */
  public static final int HOTSET_KEYS_PER_INSTANCE_MAX = (int) get("hotset_keys_per_instance_max");
  /** Silent instances holding no keys are forgotten after this long ({@code hotset_forget_idle_s}). */
  public static final long HOTSET_FORGET_IDLE_S = get("hotset_forget_idle_s");
  /** Largest count in one record ({@code count_max}, 2^32-1). */
  public static final long COUNT_MAX = get("count_max");
  /** Entries of one demand report ({@code demand_entries_max}). */
  public static final int DEMAND_ENTRIES_MAX = (int) get("demand_entries_max");
  /** Largest demand report in bytes ({@code demand_report_bytes_max}). */
  public static final int DEMAND_REPORT_BYTES_MAX = (int) get("demand_report_bytes_max");
  /** Default bound of a client's start, in ms ({@code start_timeout_ms}; spec/failure.md). */
  public static final long START_TIMEOUT_MS = get("start_timeout_ms");
  /** Shortest signing key ({@code auth_key_bytes_min}). */
  public static final int AUTH_KEY_BYTES_MIN = (int) get("auth_key_bytes_min");

  private Limits() {}

  /** The value of limit {@code name}; throws if limits.json has no such limit. */
  public static long get(String name) {
    JsonNode v = LIMITS.path(name).get("value");
    if (v == null || !v.canConvertToLong()) {
      throw new IllegalStateException("hotkeyd: limits.json has no integer limit " + name);
    }
    return v.asLong();
  }

  private static JsonNode load() {
    try (InputStream in = Limits.class.getResourceAsStream("limits.json")) {
      if (in == null) {
        throw new IllegalStateException("hotkeyd: io/hotkeyd/limits.json is missing from the class path");
      }
      return new com.fasterxml.jackson.databind.ObjectMapper().readTree(in).path("limits");
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
