package io.hotkeyd.idempotency;

/** Redis failed and the guard fails closed: nothing ran (or the outcome was not recorded). */
public class IdempotencyUnavailableException extends IdempotencyException {
  private static final long serialVersionUID = 1L;

  public IdempotencyUnavailableException(String message, Throwable cause) {
    super(message, cause);
  }
}
