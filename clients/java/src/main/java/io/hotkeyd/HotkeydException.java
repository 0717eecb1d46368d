package io.hotkeyd;

/** Root of every exception this client defines. */
public class HotkeydException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public HotkeydException(String message) {
    super(message);
  }

  public HotkeydException(String message, Throwable cause) {
    super(message, cause);
  }
}
