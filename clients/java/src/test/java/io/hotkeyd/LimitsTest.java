package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import javax.tools.JavaCompiler;
import javax.tools.ToolProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The limits are data, and the conformance runner goes through the subscriber's handler:
 * both proven by loading the client again, in a class loader that sees a changed file first.
 */
class LimitsTest {
  static final byte[] MSG = ("{\"v\":1,\"instance\":\"d1\",\"seq\":1,\"ts\":1,\"full\":true,\"final\":false,"
      + "\"hot\":[{\"key\":\"a\",\"rate\":1,\"rule\":\"r\",\"ttl_ms\":1001}],"
      + "\"cool\":[{\"key\":\"b\"},{\"key\":\"c\"}]}").getBytes(StandardCharsets.UTF_8);

  /** A fresh copy of the client and its dependencies, with {@code first} ahead of them. */
  static URLClassLoader loaderWith(Path first) throws Exception {
    List<URL> urls = new ArrayList<>();
    urls.add(first.toUri().toURL());
    for (String entry : System.getProperty("java.class.path").split(File.pathSeparator)) {
      urls.add(Path.of(entry).toUri().toURL());
    }
    return new URLClassLoader(urls.toArray(new URL[0]), ClassLoader.getPlatformClassLoader());
  }

  @Test
  void aChangedLimitsFileChangesTheDecoder(@TempDir Path tmp) throws Exception {
    assertEquals(0, Message.parse(MSG).skipped());
    ObjectNode doc;
    try (var in = Limits.class.getResourceAsStream("limits.json")) {
      doc = (ObjectNode) Wire.JSON.readTree(in);
    }
    ((ObjectNode) doc.get("limits").get("ttl_ms_max")).put("value", 1000);
    ((ObjectNode) doc.get("limits").get("message_entries_max")).put("value", 2);
    Path res = Files.createDirectories(tmp.resolve("io/hotkeyd"));
    Files.write(res.resolve("limits.json"), Wire.JSON.writeValueAsBytes(doc));
    try (URLClassLoader loader = loaderWith(tmp)) {
      Class<?> message = loader.loadClass("io.hotkeyd.Message");
      assertNotEquals(Message.class, message);
      Object msg = message.getMethod("parse", byte[].class).invoke(null, (Object) MSG);
      assertEquals(2, message.getMethod("skipped").invoke(msg));
      assertEquals(0, ((List<?>) message.getMethod("hot").invoke(msg)).size());
      assertEquals(1, ((List<?>) message.getMethod("cool").invoke(msg)).size());
    }
  }

  @Test
  void theRunnerFailsWhenTheHandlerSkipsTheGapResync(@TempDir Path tmp) throws Exception {
    Path src = Path.of("src/main/java/io/hotkeyd/SubscriberCore.java");
    String code = Files.readString(src);
    String broken = code.replace("if (msg != null && onEvent(msg)) {", "if (msg != null && onEvent(msg) && false) {");
    assertNotEquals(code, broken, "the handler's gap check is not where this test expects it");
    Path copy = Files.createDirectories(tmp.resolve("src/io/hotkeyd")).resolve("SubscriberCore.java");
    Files.writeString(copy, broken);
    Path classes = Files.createDirectories(tmp.resolve("classes"));
    JavaCompiler javac = ToolProvider.getSystemJavaCompiler();
    StringWriter errors = new StringWriter();
    int rc = javac.getTask(new PrintWriter(errors), null, null,
        List.of("-d", classes.toString(), "-cp", System.getProperty("java.class.path"), "-proc:none",
            "-nowarn"),
        null, javac.getStandardFileManager(null, null, null).getJavaFileObjects(copy)).call() ? 0 : 1;
    assertEquals(0, rc, errors.toString());
    try (URLClassLoader loader = loaderWith(classes)) {
      Class<?> runner = loader.loadClass("io.hotkeyd.ConformanceTest");
      Method run = runner.getDeclaredMethod("runHotSetVectors", String.class);
      run.setAccessible(true);
      InvocationTargetException e =
          assertThrows(InvocationTargetException.class, () -> run.invoke(null, "hotset.json"));
      assertTrue(e.getCause() instanceof AssertionError, e.getCause().toString());
      assertTrue(e.getCause().getMessage().contains("resynced"), e.getCause().getMessage());
    }
  }
}
