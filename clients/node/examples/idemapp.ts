// idemapp drives the idempotency guard one request per stdin line, for the cross-language
// tests (tests/interop/test_idempotency.py); protocol in clients/go/examples/idemapp.
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { IdempotencyGuard, IdempotencyUnavailable, LeaseLostError } from "../src/index.js";

const { values } = parseArgs({ options: { url: { type: "string", default: "redis://127.0.0.1:6379/0" }, "lease-ms": { type: "string", default: "10000" } } });
const guard = new IdempotencyGuard(new Redis(values.url!), { leaseMs: Number(values["lease-ms"]), ttlMs: 3600_000 });

async function handle(req: { op: string; key: string; fp?: string; token?: string; result?: string }): Promise<object> {
  if (req.op === "begin") {
    const b = await guard.begin(req.key, req.fp ?? "");
    if (b.outcome === "new") return { outcome: "new", token: b.lease!.token.toString(), takeover: b.takeover };
    if (b.outcome === "done") return { outcome: "done", result: b.result!.toString("utf8"), failed: b.failed };
    if (b.outcome === "in_progress") return { outcome: "in_progress", retry_after_ms: b.retryAfterMs };
    return { outcome: "mismatch" };
  }
  const lease = guard.resume(req.key, BigInt(req.token ?? "0"));
  try {
    if (req.op === "complete") await guard.complete(lease, req.result ?? "");
    else if (req.op === "fail") await guard.fail(lease, req.result ?? "");
    else if (req.op === "release") await guard.release(lease);
    else if (req.op === "extend") await guard.extend(lease);
    else return { error: `unknown op ${req.op}` };
    return { ok: true };
  } catch (err) {
    if (err instanceof LeaseLostError) return { error: "lease_lost" };
    if (err instanceof IdempotencyUnavailable) return { error: "unavailable" };
    throw err;
  }
}

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  let reply: object;
  try {
    reply = await handle(JSON.parse(line));
  } catch (err) {
    reply = { error: String((err as Error).message ?? err) };
  }
  process.stdout.write(JSON.stringify(reply) + "\n");
}
guard.client.disconnect();
