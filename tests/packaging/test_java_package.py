"""The Java client from ``dist/maven`` in a fresh Maven project outside the repository.

The project declares the dependency exactly as the README does, with ``dist/maven`` (what
``make dist`` writes: jar, sources and javadoc jars, POM, in the repository layout) as its
repository, and an SLF4J binding of its own choosing (the client depends on the API only).
Kafka is optional in the POM: the resolved class path must not contain kafka-clients.
The program reads a hot key through a real daemon.

Cost: ~15 s (Maven from its local repository, the daemon's detection).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from .fresh import DIST, KEY, ROOT, VERSION, hot_key_deployment, make_dist, need, result, run

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId>
  <artifactId>app</artifactId>
  <version>1</version>
  <properties><maven.compiler.release>17</maven.compiler.release></properties>
  <repositories>
    <repository><id>hotkeyd-dist</id><url>{repo}</url></repository>
  </repositories>
  <dependencies>
{dependency}
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId>
    <artifactId>maven-compiler-plugin</artifactId>
    <version>3.13.0</version>
  </plugin></plugins></build>
</project>
"""

APP = """import io.hotkeyd.HotCache;
import io.hotkeyd.KeyId;
import io.hotkeyd.Namespace;
import redis.clients.jedis.JedisPooled;

public class Read {
  public static void main(String[] args) throws Exception {
    java.net.URI url = java.net.URI.create(args[0]);
    String key = args[2];
    try (JedisPooled redis = new JedisPooled(url.getHost(), url.getPort());
         HotCache cache = HotCache.builder(redis).namespace(Namespace.of(args[1])).build().start()) {
      long deadline = System.nanoTime() + 60_000_000_000L;
      String value = null;
      while (System.nanoTime() < deadline) {
        value = cache.get(key);
        if (cache.hotset().get(KeyId.of(key)) != null && cache.stats().hits.sum() > 100) break;
      }
      boolean hot = cache.hotset().get(KeyId.of(key)) != null;
      System.out.println("{\\"hot\\": " + hot + ", \\"value\\": \\"" + value
          + "\\", \\"local\\": " + cache.stats().hits.sum() + "}");
    }
  }
}
"""


def _readme_dependency() -> str:
    readme = (ROOT / "clients" / "java" / "README.md").read_text()
    start = readme.index("<dependency>\n  <groupId>io.hotkeyd</groupId>")
    block = readme[start : readme.index("</dependency>", start) + len("</dependency>")]
    assert f"<version>{VERSION}</version>" in block, "README's coordinates are not VERSION"
    return "\n".join("    " + line for line in block.splitlines())


def test_jar_from_dist_in_a_fresh_maven_project_reads_a_hot_key(tmp_path: Path) -> None:
    mvn = need("mvn")
    make_dist("java")
    repo = DIST / "maven"
    jars = sorted(p.name for p in (repo / "io/hotkeyd/hotkeyd-client" / VERSION).iterdir())
    assert jars == [
        f"hotkeyd-client-{VERSION}-javadoc.jar",
        f"hotkeyd-client-{VERSION}-sources.jar",
        f"hotkeyd-client-{VERSION}.jar",
        f"hotkeyd-client-{VERSION}.pom",
    ]
    app = tmp_path / "app"
    src = app / "src" / "main" / "java"
    src.mkdir(parents=True)
    (app / "pom.xml").write_text(POM.format(repo=repo.as_uri(), dependency=_readme_dependency()))
    (src / "Read.java").write_text(APP)
    cp_file = app / "cp.txt"
    run([mvn, "-q", "-B", "compile", "dependency:build-classpath",
         f"-Dmdep.outputFile={cp_file}"], app)  # fmt: skip
    classpath = cp_file.read_text().strip()
    assert f"hotkeyd-client-{VERSION}.jar" in classpath
    assert "kafka-clients" not in classpath, "Kafka is optional: not on an app's class path"
    assert "slf4j-api" in classpath
    cp = f"{app / 'target' / 'classes'}:{classpath}"
    with hot_key_deployment(tmp_path) as dep:
        out = run([need("java"), "-cp", cp, "Read", dep.redis_url, dep.namespace, KEY], app,
                  timeout=90)  # fmt: skip
    result(out)
