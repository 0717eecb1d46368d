package io.hotkeyd.idempotency;

/**
 * The durable store already holds another completion of the key: the operation ran twice
 * after Redis lost its record. The first result is kept ({@link #stored()}: what retries
 * replay); answer with it.
 */
public class DuplicateCompletionException extends IdempotencyException {
  private static final long serialVersionUID = 1L;
  private final transient StoredFinal stored;

  DuplicateCompletionException(String key, StoredFinal stored) {
    super("idempotency key \"" + key + "\" was completed twice (Redis lost its record); "
        + "the first result is kept");
    this.stored = stored;
  }

  /** The completion the store kept. */
  public StoredFinal stored() {
    return stored;
  }
}
