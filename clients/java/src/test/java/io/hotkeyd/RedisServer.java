package io.hotkeyd;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;

/** A throwaway redis-server on a free port (the tests talk to real servers, never mocks). */
final class RedisServer implements AutoCloseable {
  final int port;
  private final Process proc;

  RedisServer() throws IOException, InterruptedException {
    this(List.of());
  }

  /** With extra server arguments; the server runs in a fresh temporary directory. */
  RedisServer(List<String> extra) throws IOException, InterruptedException {
    this.port = freePort();
    String bin = System.getenv().getOrDefault("REDIS_SERVER", "redis-server");
    java.util.List<String> args = new java.util.ArrayList<>(List.of(bin, "--port",
        Integer.toString(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir",
        java.nio.file.Files.createTempDirectory("hotkeyd-redis-").toString()));
    args.addAll(extra);
    proc = new ProcessBuilder(args)
        .redirectOutput(new File("/dev/null"))
        .redirectError(ProcessBuilder.Redirect.INHERIT)
        .start();
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (true) {
      try (Socket s = new Socket("127.0.0.1", port)) {
        s.getInputStream(); // connected: the server accepts
        return;
      } catch (IOException e) {
        if (System.nanoTime() > deadline || !proc.isAlive()) {
          proc.destroyForcibly();
          throw new IOException("redis-server did not start on port " + port, e);
        }
        Thread.sleep(20);
      }
    }
  }

  static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  @Override
  public void close() {
    proc.destroy();
    try {
      proc.waitFor();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
