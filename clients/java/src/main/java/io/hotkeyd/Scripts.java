package io.hotkeyd;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;

/** The shared Lua scripts (spec/lua, packaged into the jar at build time). */
final class Scripts {
  private Scripts() {}

  static String load(String name) {
    try (InputStream in = Scripts.class.getResourceAsStream("/io/hotkeyd/lua/" + name)) {
      if (in == null) {
        throw new HotkeydException("Lua script " + name + " is missing from the jar");
      }
      return new String(in.readAllBytes(), StandardCharsets.UTF_8);
    } catch (IOException e) {
      throw new HotkeydException("cannot read Lua script " + name, e);
    }
  }
}
