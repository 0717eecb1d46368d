package io.hotkeyd;

/** A notification, snapshot, invalidation or key entry does not follow the wire format. */
public class WireException extends HotkeydException {
  private static final long serialVersionUID = 1L;

  public WireException(String message) {
    super(message);
  }

  public WireException(String message, Throwable cause) {
    super(message, cause);
  }
}
