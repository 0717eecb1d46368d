package io.hotkeyd;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;

/**
 * A TCP proxy to a real server that can be frozen: frozen, it keeps every connection open but
 * forwards nothing (a half-open path: no FIN, no RST), like a NAT that forgot the flow.
 */
final class FreezableProxy implements AutoCloseable {
  final int port;
  volatile boolean frozen;
  private final ServerSocket listener;
  private final int target;
  private final List<Socket> sockets = new CopyOnWriteArrayList<>();

  FreezableProxy(int targetPort) throws IOException {
    this.target = targetPort;
    this.listener = new ServerSocket(0, 50, InetAddress.getLoopbackAddress());
    this.port = listener.getLocalPort();
    daemon(this::accept, "proxy-accept");
  }

  private static void daemon(Runnable r, String name) {
    Thread t = new Thread(r, name);
    t.setDaemon(true);
    t.start();
  }

  private void accept() {
    while (!listener.isClosed()) {
      try {
        Socket c = listener.accept();
        Socket u = new Socket(InetAddress.getLoopbackAddress(), target);
        sockets.add(c);
        sockets.add(u);
        daemon(() -> pipe(c, u), "proxy-up");
        daemon(() -> pipe(u, c), "proxy-down");
      } catch (IOException e) {
        return; // closed
      }
    }
  }

  private void pipe(Socket from, Socket to) {
    byte[] buf = new byte[32 << 10];
    try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
      int n;
      while ((n = in.read(buf)) >= 0) {
        if (!frozen) { // frozen: read and swallowed, never forwarded
          out.write(buf, 0, n);
          out.flush();
        }
      }
    } catch (IOException e) {
      // one side closed
    } finally {
      closeQuietly(from);
      closeQuietly(to);
    }
  }

  private static void closeQuietly(Socket s) {
    try {
      s.close();
    } catch (IOException e) {
      // already closed
    }
  }

  @Override
  public void close() throws IOException {
    listener.close();
    for (Socket s : sockets) {
      closeQuietly(s);
    }
  }
}
