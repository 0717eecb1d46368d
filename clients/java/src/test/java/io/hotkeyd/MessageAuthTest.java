package io.hotkeyd;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import redis.clients.jedis.JedisPooled;

/** Signed messages: the shared vectors (spec/vectors/auth.json) and a real subscriber. */
class MessageAuthTest {
  static JsonNode vectors() throws Exception {
    Path p = Path.of(System.getProperty("hotkeyd.spec", "../../spec"), "vectors", "auth.json");
    return Wire.JSON.readTree(Files.readAllBytes(p));
  }

  static byte[] b(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  @Test
  void signAndRejectVectors() throws Exception {
    JsonNode doc = vectors();
    MessageAuth auth = new MessageAuth(List.of(b(doc.get("key_utf8").asText())));
    for (JsonNode c : doc.get("sign")) {
      byte[] body = b(c.get("body").asText());
      assertEquals(c.get("mac_hex").asText(),
          new String(auth.mac(body, b(doc.get("key_utf8").asText())), StandardCharsets.US_ASCII));
      assertArrayEquals(b(c.get("signed").asText()), auth.sign(body), c.get("name").asText());
      assertArrayEquals(body, auth.verify(b(c.get("signed").asText())), c.get("name").asText());
    }
    for (JsonNode c : doc.get("reject")) {
      assertNull(auth.verify(b(c.get("signed").asText())), c.get("name").asText());
    }
    assertThrows(HotkeydException.class, () -> new MessageAuth(List.of(b("short"))));
  }

  @Test
  void aSubscriberWithAKeyReadsOnlySignedMessages() throws Exception {
    MessageAuth auth = new MessageAuth(List.of(b("a-key-of-at-least-16-bytes")));
    try (RedisServer server = new RedisServer();
        JedisPooled jedis = new JedisPooled("127.0.0.1", server.port);
        Subscriber sub = Subscriber.builder(jedis).auth(auth).build().start()) {
      assertTrue(sub.awaitReady(10, TimeUnit.SECONDS));
      FakeDaemon d = new FakeDaemon(jedis, Namespace.DEFAULT, "d1");
      d.seq = 1;
      byte[] forged = Wire.dumps(d.message(true, new com.fasterxml.jackson.databind.node.ObjectNode[] {FakeDaemon.hot("forged", 60_000)}));
      jedis.publish(b(Namespace.DEFAULT.channel()), forged);
      d.seq = 2;
      byte[] real = auth.sign(Wire.dumps(d.message(true, new com.fasterxml.jackson.databind.node.ObjectNode[] {FakeDaemon.hot("real", 60_000)})));
      jedis.publish(b(Namespace.DEFAULT.channel()), real);
      SubscriberTest.await(() -> sub.hotset().isHot(KeyId.of("real")), "the signed message applies");
      assertTrue(!sub.hotset().isHot(KeyId.of("forged")));
      assertEquals(1, sub.stats().unsigned.get());
    }
  }
}
