// idemhttp: the order API of clients/go/examples/idemhttp behind the Node middleware, for
// the cross-language HTTP test (tests/interop/test_idempotency.py).
import { createServer } from "node:http";
import { parseArgs } from "node:util";
import { Redis } from "ioredis";
import { idempotency, IdempotencyGuard, Namespace, type GuardedRequest } from "../src/index.js";

const { values } = parseArgs({
  options: { url: { type: "string", default: "redis://127.0.0.1:6379/0" }, port: { type: "string", default: "8080" }, prefix: { type: "string", default: "hotkeyd" } },
});
const redis = new Redis(values.url!);
const guard = new IdempotencyGuard(redis, { leaseMs: 10_000, namespace: new Namespace(values.prefix!) });
const mw = idempotency(guard, { required: (req) => req.url === "/order" }); // keys scoped by the Authorization header

const server = createServer((req, res) => {
  mw(req, res, async (err?: unknown) => {
    if (err || req.method !== "POST" || req.url !== "/order") {
      res.statusCode = err ? 500 : 404;
      res.end();
      return;
    }
    const n = await redis.incr(`${values.prefix}:orders`);
    const body = (req as GuardedRequest).rawBody?.toString("utf8") ?? "";
    res.writeHead(201, { "Content-Type": "application/json", "X-App": "node" });
    res.end(JSON.stringify({ order: n, lang: "node", request: body }) + "\n");
  });
});
server.listen(Number(values.port), "127.0.0.1", () => process.stdout.write('{"event":"ready"}\n'));
