/**
 * Connect-style `(req, res, next)` middleware honouring the Idempotency-Key header (IETF
 * draft "The Idempotency-Key HTTP Header Field"), for Express and plain `node:http` (Fastify:
 * `fastifyIdempotency` in fastify.ts). No framework is imported. The answers are those of
 * the Python, Go and Java middleware (docs/idempotency.md, "HTTP"):
 *
 *   first request with a key           the handler's response (stored when final)
 *   retry after it finished            the stored response + Idempotent-Replayed: true
 *   retry while the first still runs   409 Conflict, Retry-After
 *   same key, other request            422 Unprocessable Content
 *   bad, repeated or (if required) missing key   400; body over maxBody: 413
 *   Redis down, failing closed         503 Service Unavailable, Retry-After
 *
 * A 5xx, 408, 425 or 429 releases the key, so the client's retry runs again. The lease is
 * renewed while the handler runs, and the renewal stops when the response ends. Keys are
 * scoped by caller (the Authorization header's digest, or `user`); errors are RFC 9457
 * problems; a 409's Retry-After is the lower of the lease left and the route's median time.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import { IdempotencyGuard, type Lease } from "./guard.js";
import { IdempotencyKeyError } from "./keys.js";
import { errorResponse, HandlerTimes, isFinal, keyOf, refusal, requestFingerprint, encodeResponse, warning, type Headers, type IdempotencyPolicy as Policy, type KeyOf, type Stored } from "./http.js";

export { decodeResponse, encodeResponse, PROBLEM_TYPE, REPLAYED_HEADER } from "./http.js";

/** Which requests the Express / node:http middleware guards, and how (see http.ts). */
export type IdempotencyPolicy = Policy<IncomingMessage>;

/** What the middleware adds to a guarded request. */
export interface GuardedRequest extends IncomingMessage {
  /** the lease (for its fencing token) */
  idempotencyLease?: Lease;
  /** the request body, as read (the middleware must hash it) */
  rawBody?: Buffer;
  /** parsed JSON for application/json, else the raw Buffer */
  body?: unknown;
}

type Next = (err?: unknown) => void;

function send(res: ServerResponse, r: Stored): void {
  const grouped = new Map<string, string[]>();
  for (const [k, v] of r.h) grouped.set(k.toLowerCase(), [...(grouped.get(k.toLowerCase()) ?? []), v]);
  for (const [k, vs] of grouped) res.setHeader(k, vs.length === 1 ? vs[0] : vs);
  res.statusCode = r.s;
  res.end(r.body);
}

/** The header's field lines, one per line as received. */
export function headerLines(req: IncomingMessage, lower: string): string[] | undefined {
  return req.headersDistinct?.[lower] ?? (req.headers[lower] === undefined ? undefined : [String(req.headers[lower])]);
}

async function readBody(req: GuardedRequest, limit: number): Promise<Buffer | null> {
  if (Buffer.isBuffer(req.rawBody)) return req.rawBody.length > limit ? null : req.rawBody;
  if ((req as { _body?: boolean })._body) return Buffer.from(JSON.stringify(req.body ?? null)); // a parser ran first
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > limit) return null;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** The middleware (see the module comment). */
export function idempotency(guard: IdempotencyGuard, policy: IdempotencyPolicy = {}) {
  const methods = new Set((policy.methods ?? ["POST", "PATCH", "PUT", "DELETE"]).map((m) => m.toUpperCase()));
  const header = policy.header ?? "Idempotency-Key";
  const lower = header.toLowerCase();
  const maxBody = policy.maxBody ?? 1 << 20;

  const times = new HandlerTimes(); // for 409's Retry-After

  return function idempotencyMiddleware(req: GuardedRequest, res: ServerResponse, next: Next): void {
    if (!methods.has((req.method ?? "GET").toUpperCase())) return next();
    const k = keyOf(policy, req, headerLines(req, lower), req.headers.authorization);
    if (k === null) return next();
    if ("s" in k) return send(res, k);
    void guarded(req, res, next, k).catch(next);
  };

  async function guarded(req: GuardedRequest, res: ServerResponse, next: Next, k: KeyOf): Promise<void> {
    const body = await readBody(req, maxBody);
    if (body === null) return send(res, errorResponse(413, `request body over ${maxBody} bytes`));
    const fp = requestFingerprint(req.method, req.url, body);
    const path = new URL(req.url ?? "/", "http://x").pathname;
    let b;
    try {
      b = await guard.begin(k.key, fp);
      if (b.outcome === "new" && b.lease && k.legacy !== undefined && !b.takeover) {
        const old = await guard.peek(k.legacy, fp).catch(async (err: unknown) => {
          await guard.abandon(b!.lease as Lease);
          throw err;
        });
        if (old !== null) { // written before per-caller scopes: still replayed
          await guard.abandon(b.lease);
          return send(res, refusal(old));
        }
      }
    } catch (err) {
      if (err instanceof IdempotencyKeyError) return send(res, errorResponse(400, err.message));
      return send(res, errorResponse(503, "idempotency check unavailable, retry later", 1));
    }
    if (b.outcome !== "new") return send(res, refusal(b, times.median(path)));
    const lease = b.lease as Lease;
    req.idempotencyLease = lease;
    req.rawBody = body;
    if (req.body === undefined) req.body = parseBody(req, body);
    (req as { _body?: boolean })._body = true; // body parsers after us: already read
    capture(res, lease, path);
    next();
  }

  function capture(res: ServerResponse, lease: Lease, path: string): void {
    const started = performance.now();
    const ka = guard.keepAlive(lease);
    const chunks: Buffer[] = [];
    const origEnd = res.end.bind(res);
    const origWriteHead = res.writeHead.bind(res);
    let ended = false;
    const push = (chunk: unknown, enc?: unknown) => {
      if (chunk === undefined || chunk === null || typeof chunk === "function") return;
      chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string, typeof enc === "string" ? (enc as BufferEncoding) : "utf8"));
    };
    res.writeHead = ((status: number, a?: unknown, b?: unknown) => {
      res.statusCode = status;
      const hs = (typeof a === "string" ? b : a) as OutgoingHttpHeaders | string[] | undefined;
      if (Array.isArray(hs)) for (let i = 0; i + 1 < hs.length; i += 2) res.setHeader(hs[i], hs[i + 1]);
      else if (hs) for (const [k, v] of Object.entries(hs)) if (v !== undefined) res.setHeader(k, v);
      return res;
    }) as typeof res.writeHead;
    res.write = ((chunk: unknown, enc?: unknown, cb?: unknown) => {
      push(chunk, enc);
      const done = typeof enc === "function" ? enc : cb;
      if (typeof done === "function") queueMicrotask(() => (done as () => void)());
      return true;
    }) as typeof res.write;
    res.end = ((chunk?: unknown, enc?: unknown, cb?: unknown) => {
      if (ended) return res;
      ended = true;
      push(chunk, enc);
      const done = [chunk, enc, cb].find((x) => typeof x === "function") as (() => void) | undefined;
      void finish().then(done);
      return res;
    }) as typeof res.end;
    // A client that hangs up does not stop the renewal: the handler still runs, and its
    // outcome is recorded whole for the client's retry.

    async function finish(): Promise<void> {
      times.add(path, (performance.now() - started) / 1000);
      await ka.stop();
      const body = Buffer.concat(chunks);
      const h: Headers = [];
      for (const name of Object.keys(res.getHeaders()).sort()) {
        const v = res.getHeader(name);
        for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) h.push([name, String(one)]);
      }
      if (!isFinal(res.statusCode)) {
        await guard.abandon(lease);
      } else {
        try {
          await guard.complete(lease, encodeResponse({ s: res.statusCode, h, body }));
        } catch (err) {
          res.setHeader("Idempotency-Warning", `not recorded: ${warning(err)}`);
        }
      }
      origWriteHead(res.statusCode);
      origEnd(body);
    }
  }
}

function parseBody(req: IncomingMessage, body: Buffer): unknown {
  if (/^application\/([\w.+-]*\+)?json/i.test(req.headers["content-type"] ?? "")) {
    try {
      return JSON.parse(body.toString("utf8"));
    } catch {
      return body;
    }
  }
  return body;
}
