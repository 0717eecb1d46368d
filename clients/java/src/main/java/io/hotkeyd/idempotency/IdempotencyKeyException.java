package io.hotkeyd.idempotency;

/** An idempotency key that is empty, too long or not printable ASCII. */
public class IdempotencyKeyException extends IdempotencyException {
  private static final long serialVersionUID = 1L;

  public IdempotencyKeyException(String message) {
    super(message);
  }
}
