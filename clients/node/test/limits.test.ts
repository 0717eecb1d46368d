// The limits are data (spec/limits.json), and the conformance runner goes through the
// subscriber's own handler: both proven on a copy of the built package.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { decodeMessage } from "../src/index.js";

const PKG = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const SPEC = join(PKG, "..", "..", "spec");

/** A copy of the package at <tmp>/clients/node (spec/ beside it, as in the repository). */
function copyPackage(edit: { limits?: (l: Record<string, { value: number }>) => void; subscriber?: (js: string) => string }): string {
  const root = mkdtempSync(join(tmpdir(), "hotkeyd-node-"));
  const pkg = join(root, "clients", "node");
  mkdirSync(join(pkg, "spec"), { recursive: true });
  symlinkSync(SPEC, join(root, "spec"));
  for (const name of ["node_modules", "lua"]) symlinkSync(join(PKG, name), join(pkg, name));
  cpSync(join(PKG, "package.json"), join(pkg, "package.json"));
  cpSync(join(PKG, "dist"), join(pkg, "dist"), { recursive: true });
  const doc = JSON.parse(readFileSync(join(PKG, "spec", "limits.json"), "utf8"));
  edit.limits?.(doc.limits);
  writeFileSync(join(pkg, "spec", "limits.json"), JSON.stringify(doc));
  if (edit.subscriber) {
    const file = join(pkg, "dist", "src", "subscriber.js");
    const js = readFileSync(file, "utf8");
    const broken = edit.subscriber(js);
    assert.notEqual(broken, js, "the edit did not apply");
    writeFileSync(file, broken);
  }
  return root;
}

const MSG = JSON.stringify({
  v: 1, instance: "d1", seq: 1, ts: 1, full: true, final: false,
  hot: [{ key: "a", rate: 1, rule: "r", ttl_ms: 1001 }], cool: [{ key: "b" }, { key: "c" }],
});

test("a changed spec/limits.json changes the decoder", async () => {
  assert.equal(decodeMessage(MSG).skipped, 0);
  const root = copyPackage({
    limits: (l) => {
      l.ttl_ms_max.value = 1000;
      l.message_entries_max.value = 2;
    },
  });
  try {
    const wire = await import(pathToFileURL(join(root, "clients", "node", "dist", "src", "wire.js")).href);
    const msg = wire.decodeMessage(MSG);
    assert.equal(msg.skipped, 2);
    assert.equal(msg.hot.length, 0);
    assert.equal(msg.cool.length, 1);
    assert.equal(wire.MAX_TTL_MS, 1000);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

test("the hot-set runner fails on a copy whose handler skips the resync on a gap", () => {
  const root = copyPackage({
    subscriber: (js) => js.replace(/if \(r !== "gap"\)\s*return this\.count\(r\);/, "return this.count(r);"),
  });
  try {
    const runner = join(root, "clients", "node", "dist", "test", "conformance.test.js");
    const env = { ...process.env };
    delete env.NODE_TEST_CONTEXT; // else the child reports to this runner, not to its stdout
    const out = spawnSync(process.execPath, ["--test", "--test-name-pattern=^hotset\\.json$", runner], { encoding: "utf8", env });
    assert.notEqual(out.status, 0, `the runner passed with a broken handler:\n${out.stdout}`);
    assert.match(out.stdout, /'resynced'/, out.stdout);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});
