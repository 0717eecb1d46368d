package io.hotkeyd;

/** A spread-mode {@link ShardedCounter#take} failed after committing some units. */
public class PartialTakeException extends HotkeydException {
  private static final long serialVersionUID = 1L;
  private final long taken;
  private final long wanted;

  public PartialTakeException(String message, long taken, long wanted, Throwable cause) {
    super(message, cause);
    this.taken = taken;
    this.wanted = wanted;
  }

  /** Units really taken (gone from the stock); the rest were not. */
  public long taken() {
    return taken;
  }

  public long wanted() {
    return wanted;
  }
}
