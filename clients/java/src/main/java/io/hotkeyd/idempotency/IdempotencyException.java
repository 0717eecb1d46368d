package io.hotkeyd.idempotency;

import io.hotkeyd.HotkeydException;

/**
 * Root of the guard's exceptions.
 *
 * <pre>
 * HotkeydException
 *  └─ IdempotencyException
 *      ├─ IdempotencyKeyException          bad key (HTTP 400)
 *      ├─ IdempotencyUnavailableException  Redis failed, failing closed (HTTP 503)
 *      ├─ LeaseLostException               refused by the fencing token
 *      └─ DuplicateCompletionException     the durable store holds another completion
 * </pre>
 */
public class IdempotencyException extends HotkeydException {
  private static final long serialVersionUID = 1L;

  public IdempotencyException(String message) {
    super(message);
  }

  public IdempotencyException(String message, Throwable cause) {
    super(message, cause);
  }
}
