/**
 * The idempotency guard: run an operation once per key, across threads, hosts and
 * languages.
 *
 * <p>Every transition is one of the shared Lua scripts in {@code spec/lua/idempotency_*.lua}
 * (packaged into the jar by Maven), and the records are the Redis hashes every hotkeyd
 * client writes, so a key begun here can be completed by the Go client and replayed by
 * the Python one. {@link io.hotkeyd.idempotency.IdempotencyGuard} is the plain API (a
 * builder, an {@code AutoCloseable} lease renewed in the background);
 * {@link io.hotkeyd.idempotency.IdempotencyFilter} is the servlet filter (the servlet API
 * is a {@code provided} dependency: only apps that use the filter need it).
 */
package io.hotkeyd.idempotency;
