package io.hotkeyd;

/**
 * Redis refused the credentials or the ACL permissions (WRONGPASS, NOAUTH, NOPERM): retrying
 * cannot fix it, so the subscriber stops and reports this instead of reconnecting forever.
 */
public class RedisAccessException extends HotkeydException {
  private static final long serialVersionUID = 1L;

  public RedisAccessException(String message, Throwable cause) {
    super(message, cause);
  }

  /** The Redis error among {@code e} and its causes that retrying cannot fix, or null. */
  static Throwable refusal(Throwable e) {
    for (Throwable t = e; t != null; t = t.getCause() == t ? null : t.getCause()) {
      String m = t.getMessage();
      if (t instanceof redis.clients.jedis.exceptions.JedisDataException && m != null
          && (m.startsWith("WRONGPASS") || m.startsWith("NOAUTH") || m.startsWith("NOPERM"))) {
        return t;
      }
    }
    return null;
  }
}
