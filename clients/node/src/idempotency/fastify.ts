/**
 * The idempotency middleware as a Fastify plugin: the answers of `idempotency()` (see
 * http.ts and middleware.ts), with Fastify's hooks. Fastify is not imported (the types
 * below are the few members used), so it stays an optional peer of this package.
 *
 *   app.register(fastifyIdempotency(guard, { required: (req) => req.url === "/order" }));
 *
 * onRequest checks the key, preParsing keeps the raw body (the fingerprint hashes the
 * bytes, as every other language does) and hands Fastify's parser a copy, preHandler
 * begins, and onSend stores the final response (or releases the key on a 5xx, 408, 425,
 * 429 or a thrown handler). The lease is renewed from preHandler to onSend.
 */
import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { Readable } from "node:stream";
import { IdempotencyGuard, type KeepAlive, type Lease } from "./guard.js";
import { IdempotencyKeyError } from "./keys.js";
import { encodeResponse, errorResponse, HandlerTimes, isFinal, keyOf, refusal, requestFingerprint, warning, type Headers, type IdempotencyPolicy, type KeyOf, type Stored } from "./http.js";
import { headerLines } from "./middleware.js";

/** The members of a FastifyRequest the plugin uses. */
export interface FastifyRequestLike {
  raw: IncomingMessage;
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** the lease of a guarded request (for its fencing token) */
  idempotencyLease?: Lease | null;
}

/** The members of a FastifyReply the plugin uses. */
export interface FastifyReplyLike {
  statusCode: number;
  code(status: number): FastifyReplyLike;
  header(name: string, value: string | string[]): FastifyReplyLike;
  getHeaders(): Record<string, unknown>;
  send(payload?: unknown): FastifyReplyLike;
}

/** The members of a FastifyInstance the plugin uses. */
export interface FastifyLike {
  addHook(name: string, hook: (...args: never[]) => unknown): unknown;
  decorateRequest(name: string, value: unknown): unknown;
}

interface State {
  k: KeyOf;
  body: Buffer;
  lease?: Lease;
  ka?: KeepAlive;
  started: number;
  path: string;
  ended: boolean;
}

class BodyTooLarge extends Error {
  readonly statusCode = 413;
}

/** A Fastify plugin (not encapsulated: its hooks apply to the routes of the instance it is registered on). */
export function fastifyIdempotency(guard: IdempotencyGuard, policy: IdempotencyPolicy<FastifyRequestLike> = {}) {
  const methods = new Set((policy.methods ?? ["POST", "PATCH", "PUT", "DELETE"]).map((m) => m.toUpperCase()));
  const lower = (policy.header ?? "Idempotency-Key").toLowerCase();
  const maxBody = policy.maxBody ?? 1 << 20;
  const times = new HandlerTimes(); // for 409's Retry-After
  const states = new WeakMap<IncomingMessage, State>();

  const send = (reply: FastifyReplyLike, r: Stored) => {
    const grouped = new Map<string, string[]>();
    for (const [k, v] of r.h) if (k.toLowerCase() !== "content-length") grouped.set(k.toLowerCase(), [...(grouped.get(k.toLowerCase()) ?? []), v]);
    reply.code(r.s);
    for (const [k, vs] of grouped) reply.header(k, vs.length === 1 ? vs[0] : vs);
    return reply.send(r.body);
  };

  async function onRequest(request: FastifyRequestLike, reply: FastifyReplyLike) {
    if (!methods.has(request.method.toUpperCase())) return;
    const k = keyOf(policy, request, headerLines(request.raw, lower), request.headers.authorization);
    if (k === null) return;
    if ("s" in k) return send(reply, k);
    if (Number(request.headers["content-length"] ?? 0) > maxBody) return send(reply, errorResponse(413, `request body over ${maxBody} bytes`));
    const path = new URL(request.raw.url ?? "/", "http://x").pathname;
    states.set(request.raw, { k, body: Buffer.alloc(0), started: 0, path, ended: false });
  }

  async function preParsing(request: FastifyRequestLike, _reply: FastifyReplyLike, payload: AsyncIterable<Buffer>) {
    const st = states.get(request.raw);
    if (!st) return payload;
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of payload) {
      size += chunk.length;
      if (size > maxBody) throw new BodyTooLarge(`request body over ${maxBody} bytes`);
      chunks.push(chunk);
    }
    st.body = Buffer.concat(chunks);
    return Readable.from(st.body.length ? [st.body] : []);
  }

  async function preHandler(request: FastifyRequestLike, reply: FastifyReplyLike) {
    const st = states.get(request.raw);
    if (!st) return;
    const fp = requestFingerprint(request.method, request.raw.url, st.body);
    let b;
    try {
      b = await guard.begin(st.k.key, fp);
      if (b.outcome === "new" && b.lease && st.k.legacy !== undefined && !b.takeover) {
        const lease = b.lease;
        const old = await guard.peek(st.k.legacy, fp).catch(async (err: unknown) => {
          await guard.abandon(lease);
          throw err;
        });
        if (old !== null) { // written before per-caller scopes: still replayed
          await guard.abandon(lease);
          return send(reply, refusal(old));
        }
      }
    } catch (err) {
      if (err instanceof IdempotencyKeyError) return send(reply, errorResponse(400, err.message));
      return send(reply, errorResponse(503, "idempotency check unavailable, retry later", 1));
    }
    if (b.outcome !== "new" || !b.lease) return send(reply, refusal(b, times.median(st.path)));
    st.lease = b.lease;
    st.ka = guard.keepAlive(b.lease);
    st.started = performance.now();
    request.idempotencyLease = b.lease;
  }

  async function onSend(request: FastifyRequestLike, reply: FastifyReplyLike, payload: unknown) {
    const st = states.get(request.raw);
    if (!st?.lease || st.ended) return payload;
    st.ended = true;
    times.add(st.path, (performance.now() - st.started) / 1000);
    await st.ka?.stop();
    const body = await toBuffer(payload);
    if (!isFinal(reply.statusCode)) {
      await guard.abandon(st.lease);
      return body;
    }
    const h: Headers = [];
    const all = reply.getHeaders();
    for (const name of Object.keys(all).sort()) {
      if (name === "content-length") continue;
      const v = all[name];
      for (const one of Array.isArray(v) ? v : [v]) if (one !== undefined) h.push([name, String(one)]);
    }
    try {
      await guard.complete(st.lease, encodeResponse({ s: reply.statusCode, h, body }));
    } catch (err) {
      reply.header("Idempotency-Warning", `not recorded: ${warning(err)}`);
    }
    return body;
  }

  async function onResponse(request: FastifyRequestLike) {
    const st = states.get(request.raw); // a response that never reached onSend: give the key back
    if (!st?.lease || st.ended) return;
    st.ended = true;
    await st.ka?.stop();
    await guard.abandon(st.lease);
  }

  const plugin = (fastify: FastifyLike, _opts: unknown, done: (err?: Error) => void) => {
    fastify.decorateRequest("idempotencyLease", null);
    fastify.addHook("onRequest", onRequest as never);
    fastify.addHook("preParsing", preParsing as never);
    fastify.addHook("preHandler", preHandler as never);
    fastify.addHook("onSend", onSend as never);
    fastify.addHook("onResponse", onResponse as never);
    done();
  };
  return Object.assign(plugin, { [Symbol.for("skip-override")]: true, [Symbol.for("fastify.display-name")]: "hotkeyd-idempotency" });
}

async function toBuffer(payload: unknown): Promise<Buffer> {
  if (payload === null || payload === undefined) return Buffer.alloc(0);
  if (Buffer.isBuffer(payload)) return payload;
  if (typeof payload === "string") return Buffer.from(payload, "utf8");
  if (typeof (payload as AsyncIterable<unknown>)[Symbol.asyncIterator] === "function") {
    const chunks: Buffer[] = [];
    for await (const c of payload as AsyncIterable<Buffer | string>) chunks.push(Buffer.isBuffer(c) ? c : Buffer.from(c));
    return Buffer.concat(chunks);
  }
  return Buffer.from(String(payload));
}
