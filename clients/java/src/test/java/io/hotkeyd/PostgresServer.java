package io.hotkeyd;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.DriverManager;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.postgresql.ds.PGSimpleDataSource;

/**
 * A throwaway PostgreSQL cluster on a free loopback port, as hotkeyd.testing's
 * PostgresServer: trust auth on 127.0.0.1, fsync off; run as the postgres user (through
 * runuser) when the tests run as root, since PostgreSQL refuses root.
 */
final class PostgresServer implements AutoCloseable {
  final int port;
  final String user;
  private final Path dir;
  private final Process proc;

  PostgresServer() throws IOException, InterruptedException {
    String bindir = bindir();
    boolean root = "root".equals(System.getProperty("user.name"));
    user = root ? "postgres" : System.getProperty("user.name");
    dir = Files.createTempDirectory("hotkeyd-pg-");
    if (root) {
      run(List.of("chown", "postgres", dir.toString()), false);
    }
    Path data = dir.resolve("data");
    run(List.of(bindir + "/initdb", "-D", data.toString(), "-U", user, "--auth=trust",
        "--no-sync", "-E", "UTF8"), root);
    try (ServerSocket s = new ServerSocket(0)) {
      port = s.getLocalPort();
    }
    proc = new ProcessBuilder(as(root, List.of(bindir + "/postgres", "-D", data.toString(),
        "-p", Integer.toString(port), "-h", "127.0.0.1", "-k", dir.toString(), "-c", "fsync=off",
        "-c", "full_page_writes=off")))
        .redirectErrorStream(true).redirectOutput(dir.resolve("server.log").toFile()).start();
    long deadline = System.nanoTime() + 30_000_000_000L;
    while (true) {
      try (var c = DriverManager.getConnection(url(), user, "")) {
        return;
      } catch (SQLException e) {
        if (System.nanoTime() > deadline || !proc.isAlive()) {
          close();
          throw new IOException("PostgreSQL did not start on port " + port, e);
        }
        Thread.sleep(50);
      }
    }
  }

  String url() {
    return "jdbc:postgresql://127.0.0.1:" + port + "/postgres";
  }

  PGSimpleDataSource dataSource() {
    PGSimpleDataSource ds = new PGSimpleDataSource();
    ds.setUrl(url());
    ds.setUser(user);
    return ds;
  }

  private static String bindir() throws IOException {
    File[] found = new File("/usr/lib/postgresql").listFiles();
    if (found != null && found.length > 0) {
      Arrays.sort(found);
      for (int i = found.length - 1; i >= 0; i--) {
        if (new File(found[i], "bin/initdb").canExecute()) {
          return found[i] + "/bin";
        }
      }
    }
    throw new IOException("PostgreSQL is not installed (apt-get install -y postgresql)");
  }

  private static List<String> as(boolean root, List<String> cmd) {
    List<String> out = new ArrayList<>();
    if (root) {
      out.addAll(List.of("runuser", "-u", "postgres", "--"));
    }
    out.addAll(cmd);
    return out;
  }

  private void run(List<String> cmd, boolean root) throws IOException, InterruptedException {
    Process p = new ProcessBuilder(as(root, cmd)).redirectErrorStream(true)
        .redirectOutput(ProcessBuilder.Redirect.DISCARD).directory(dir.toFile()).start();
    if (p.waitFor() != 0) {
      throw new IOException(String.join(" ", cmd) + " failed");
    }
  }

  @Override
  public void close() {
    if (proc != null) {
      proc.destroy(); // SIGTERM: smart shutdown, then the cluster is removed
      try {
        proc.waitFor();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
    }
    try (var files = Files.walk(dir)) {
      files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
    } catch (IOException e) {
      // a temporary directory: left behind
    }
  }
}
