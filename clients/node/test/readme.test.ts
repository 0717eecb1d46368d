// The README's example, extracted and run as is (only the URL and the package path change).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { startRedis } from "./helpers.js";

const here = dirname(fileURLToPath(import.meta.url));
const pkg = join(here, "..", "..");

test("README example runs", async () => {
  const srv = await startRedis();
  try {
    const readme = readFileSync(join(pkg, "README.md"), "utf8");
    const block = /```ts\n([\s\S]*?)```/.exec(readme);
    assert.ok(block, "no ts block in README.md");
    const code = block[1]
      .replace("redis://127.0.0.1:6379/0", `redis://127.0.0.1:${srv.port}/0`)
      .replace('"@hotkeyd/client"', JSON.stringify(join(pkg, "dist", "src", "index.js")))
      .replace('"ioredis"', JSON.stringify(join(pkg, "node_modules", "ioredis", "built", "index.js")))
      .concat('\nif (v !== "v1") throw new Error("got " + v);\n');
    const file = join(pkg, "dist", "readme-example.mjs");
    writeFileSync(file, code);
    execFileSync(process.execPath, [file], { timeout: 30_000 });
  } finally {
    await srv.stop();
  }
});
