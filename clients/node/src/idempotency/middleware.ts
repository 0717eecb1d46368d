/**
 * Connect-style `(req, res, next)` middleware honouring the Idempotency-Key header (IETF
 * draft "The Idempotency-Key HTTP Header Field"), for Express, plain `node:http`, and
 * Fastify through `@fastify/middie`. No framework is imported. The answers are those of
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
 * renewed while the handler runs, and the renewal stops when the response ends.
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from "node:http";
import { IdempotencyGuard, LeaseLostError, type Lease } from "./guard.js";
import { checkKey, fingerprint, IdempotencyKeyError, MAX_KEY_HEADER } from "./keys.js";

export const REPLAYED_HEADER = "Idempotent-Replayed";

export interface IdempotencyPolicy {
  /** methods guarded when they carry the header (POST, PATCH, PUT, DELETE) */
  methods?: string[];
  /** requests that must carry a key (400 without one) */
  required?: (req: IncomingMessage) => boolean;
  /** the caller's identity: keys are separate per user (one user cannot replay another's response) */
  user?: (req: IncomingMessage) => string;
  /** the header carrying the key ("Idempotency-Key") */
  header?: string;
  /** largest request body accepted on a guarded request (1 MiB) */
  maxBody?: number;
}

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
type Headers = [string, string][];
interface Stored {
  s: number;
  h: Headers;
  body: Buffer;
}

/** Status and headers as one JSON line, then the body bytes (the format every client stores). */
export function encodeResponse(r: Stored): Buffer {
  return Buffer.concat([Buffer.from(JSON.stringify({ s: r.s, h: r.h }), "latin1"), Buffer.from("\n"), r.body]);
}

export function decodeResponse(raw: Buffer): Stored {
  const nl = raw.indexOf(0x0a);
  const head = JSON.parse(raw.subarray(0, nl < 0 ? raw.length : nl).toString("latin1")) as { s: number; h: [string, string][] };
  return { s: Number(head.s), h: head.h.map(([k, v]) => [String(k), String(v)]), body: nl < 0 ? Buffer.alloc(0) : raw.subarray(nl + 1) };
}

const isFinal = (status: number) => status < 500 && ![408, 425, 429].includes(status);

function send(res: ServerResponse, r: Stored): void {
  const grouped = new Map<string, string[]>();
  for (const [k, v] of r.h) grouped.set(k.toLowerCase(), [...(grouped.get(k.toLowerCase()) ?? []), v]);
  for (const [k, vs] of grouped) res.setHeader(k, vs.length === 1 ? vs[0] : vs);
  res.statusCode = r.s;
  res.end(r.body);
}

function errorResponse(status: number, message: string, retryAfterS?: number): Stored {
  const body = Buffer.from(JSON.stringify({ error: message }));
  const h: Headers = [["content-type", "application/json"], ["content-length", String(body.length)]];
  if (retryAfterS !== undefined) h.push(["retry-after", String(Math.max(1, Math.ceil(retryAfterS)))]);
  return { s: status, h, body };
}

function unquote(raw: string): string {
  const t = raw.trim();
  return t.length >= 2 && t.startsWith('"') && t.endsWith('"') ? t.slice(1, -1) : t;
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

  return function idempotencyMiddleware(req: GuardedRequest, res: ServerResponse, next: Next): void {
    if (!methods.has((req.method ?? "GET").toUpperCase())) return next();
    const raw = req.headersDistinct?.[lower] ?? (req.headers[lower] === undefined ? undefined : [String(req.headers[lower])]);
    if (raw === undefined || raw.length === 0) {
      if (policy.required?.(req)) return send(res, errorResponse(400, `this route needs ${header}`));
      return next();
    }
    if (raw.length > 1) return send(res, errorResponse(400, `more than one ${header}`));
    let key: string;
    try {
      key = checkKey(unquote(raw[0]), MAX_KEY_HEADER);
    } catch (err) {
      return send(res, errorResponse(400, (err as Error).message));
    }
    if (policy.user) key = `u${fingerprint(policy.user(req))}:${key}`;
    void guarded(req, res, next, key).catch(next);
  };

  async function guarded(req: GuardedRequest, res: ServerResponse, next: Next, key: string): Promise<void> {
    const body = await readBody(req, maxBody);
    if (body === null) return send(res, errorResponse(413, `request body over ${maxBody} bytes`));
    const url = new URL(req.url ?? "/", "http://x");
    const fp = fingerprint((req.method ?? "").toUpperCase(), decodeURIComponent(url.pathname), url.search.slice(1), body);
    let b;
    try {
      b = await guard.begin(key, fp);
    } catch (err) {
      if (err instanceof IdempotencyKeyError) return send(res, errorResponse(400, err.message));
      return send(res, errorResponse(503, "idempotency check unavailable, retry later", 1));
    }
    if (b.outcome === "done") {
      const r = decodeResponse(b.result ?? Buffer.alloc(0));
      return send(res, { ...r, h: [...r.h, [REPLAYED_HEADER, "true"]] });
    }
    if (b.outcome === "in_progress") {
      return send(res, errorResponse(409, "a request with this Idempotency-Key is still being processed", b.retryAfterMs / 1000));
    }
    if (b.outcome === "mismatch") return send(res, errorResponse(422, "this Idempotency-Key was used with a different request"));
    const lease = b.lease as Lease;
    req.idempotencyLease = lease;
    req.rawBody = body;
    if (req.body === undefined) req.body = parseBody(req, body);
    (req as { _body?: boolean })._body = true; // body parsers after us: already read
    capture(res, lease);
    next();
  }

  function capture(res: ServerResponse, lease: Lease): void {
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
          res.setHeader("Idempotency-Warning", `not recorded: ${err instanceof LeaseLostError ? "LeaseLostError" : "IdempotencyUnavailable"}`);
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
