package io.hotkeyd.idempotency;

/**
 * complete, fail, extend or release was refused by the fencing token: another holder took
 * over, the record expired, or it is already final. The result was NOT stored.
 */
public class LeaseLostException extends IdempotencyException {
  private static final long serialVersionUID = 1L;
  private final String reason;

  LeaseLostException(String op, String key, long token, String reason) {
    super(op + " refused for idempotency key \"" + key + "\" (token " + token + "): "
        + switch (reason) {
          case "gone" -> "the record expired or was released (lease/TTL too short?)";
          case "fenced" -> "another holder took over after the lease ran out";
          case "final" -> "the record is already final";
          default -> reason;
        });
    this.reason = reason;
  }

  /** "gone", "fenced" or "final". */
  public String reason() {
    return reason;
  }
}
