/**
 * What the Express and Fastify middleware share: the policy, the caller scope of a key,
 * problem bodies, 409's Retry-After and the stored-response format. The answers are those
 * of the Python, Go and Java middleware (spec/vectors/idempotency.json, "http").
 */
import type { BeginResult } from "./guard.js";
import { checkKey, fingerprint, MAX_KEY_HEADER } from "./keys.js";

export const REPLAYED_HEADER = "Idempotent-Replayed";
/** The type of the middleware's problem responses: the docs' section. */
export const PROBLEM_TYPE = "docs/idempotency.md#http-idempotency-key-middleware";

export interface IdempotencyPolicy<Req> {
  /** methods guarded when they carry the header (POST, PATCH, PUT, DELETE) */
  methods?: string[];
  /** requests that must carry a key (400 without one) */
  required?: (req: Req) => boolean;
  /**
   * the caller's identity (an authenticated user or tenant id): keys are separate per
   * caller, so one caller cannot replay another's response. Default: the digest of the
   * Authorization header names the caller (requests without one share one anonymous space)
   */
  user?: (req: Req) => string;
  /** one key space for every caller (the old default): only for keys meant to be shared */
  shared?: boolean;
  /**
   * the transition window after the upgrade from the unscoped default (true): a first
   * request also looks up its key in the old unscoped space (one HMGET) and replays a final
   * record of the same request found there. Turn it off once the guard's TTL has passed.
   */
  legacyUnscoped?: boolean;
  /** the header carrying the key ("Idempotency-Key") */
  header?: string;
  /** largest request body accepted on a guarded request (1 MiB) */
  maxBody?: number;
}

export type Headers = [string, string][];
export interface Stored {
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

/** The kind of a failed completion, as every middleware names it in Idempotency-Warning. */
export function warning(err: unknown): string {
  const name = (err as Error)?.name;
  return name === "LeaseLostError" || name === "DuplicateCompletionError" ? name : "IdempotencyUnavailable";
}

export const isFinal = (status: number) => status < 500 && ![408, 425, 429].includes(status);

/** The scope of a caller's keys: "a" + the digest of the Authorization header, or "u" + the user's. */
export function callerScope(authorization: string | undefined, user?: string): string {
  return user === undefined ? `a${fingerprint(authorization ?? "")}` : `u${fingerprint(user)}`;
}

const TITLES: Record<number, string> = {
  400: "Bad Request", 409: "Conflict", 413: "Content Too Large", 422: "Unprocessable Content",
  500: "Internal Server Error", 503: "Service Unavailable",
};

/** An RFC 9457 problem (application/problem+json) whose type links the docs. */
export function errorResponse(status: number, detail: string, retryAfterS?: number): Stored {
  const body = Buffer.from(JSON.stringify({ type: PROBLEM_TYPE, title: TITLES[status] ?? "Error", status, detail }));
  const h: Headers = [["content-type", "application/problem+json"], ["content-length", String(body.length)]];
  if (retryAfterS !== undefined) h.push(["retry-after", String(Math.max(1, Math.ceil(retryAfterS)))]);
  return { s: status, h, body };
}

/**
 * The answer to a begin that is not "new": a replay, 409 or 422. `expectedS`: the route's
 * median handler time; a 409 says to retry after the lower of it and the lease left.
 */
export function refusal(b: BeginResult, expectedS?: number): Stored {
  if (b.outcome === "done") {
    const r = decodeResponse(b.result ?? Buffer.alloc(0));
    return { ...r, h: [...r.h, [REPLAYED_HEADER, "true"]] };
  }
  if (b.outcome === "in_progress") {
    const left = b.retryAfterMs / 1000;
    return errorResponse(409, "a request with this Idempotency-Key is still being processed", expectedS === undefined ? left : Math.min(left, expectedS));
  }
  return errorResponse(422, "this Idempotency-Key was used with a different request");
}

/** A running median of each route's handler time (the last `window` runs). */
export class HandlerTimes {
  private readonly byPath = new Map<string, number[]>();
  constructor(readonly window = 51) {}

  add(path: string, seconds: number): void {
    const d = this.byPath.get(path) ?? [];
    d.push(seconds);
    if (d.length > this.window) d.shift();
    this.byPath.set(path, d);
  }

  median(path: string): number | undefined {
    const d = [...(this.byPath.get(path) ?? [])].sort((a, b) => a - b);
    if (d.length === 0) return undefined;
    const m = d.length >> 1;
    return d.length % 2 ? d[m] : (d[m - 1] + d[m]) / 2;
  }
}

/** A request's key under the policy: the scoped key and the legacy (unscoped) one to look up. */
export interface KeyOf {
  key: string;
  legacy?: string;
}

/** The guard key of a request, an error response, or null (no key: not guarded). */
export function keyOf<Req>(policy: IdempotencyPolicy<Req>, req: Req, values: string[] | undefined, authorization: string | undefined): KeyOf | Stored | null {
  const header = policy.header ?? "Idempotency-Key";
  if (values === undefined || values.length === 0) {
    return policy.required?.(req) ? errorResponse(400, `this route needs ${header}`) : null;
  }
  if (values.length > 1 || severalKeys(values[0])) return errorResponse(400, `send one ${header} header, not several`);
  let key: string;
  try {
    key = checkKey(unquote(values[0]), MAX_KEY_HEADER);
  } catch (err) {
    return errorResponse(400, (err as Error).message);
  }
  if (policy.shared) return { key };
  if (policy.user) return { key: `${callerScope(undefined, policy.user(req))}:${key}` };
  return { key: `${callerScope(authorization)}:${key}`, legacy: policy.legacyUnscoped === false ? undefined : key };
}

/** A comma outside a quoted string: two field lines combined, or a list (one would silently win). */
function severalKeys(raw: string): boolean {
  let quoted = false;
  for (const ch of raw) {
    if (ch === '"') quoted = !quoted;
    else if (ch === "," && !quoted) return true;
  }
  return false;
}

/** The draft makes the key a Structured Field string ("..."); bare tokens are accepted. */
function unquote(raw: string): string {
  const t = raw.trim();
  return t.length >= 2 && t.startsWith('"') && t.endsWith('"') ? t.slice(1, -1) : t;
}

/** What identifies a request: method, decoded path, query and body. */
export function requestFingerprint(method: string | undefined, url: string | undefined, body: Buffer): string {
  const u = new URL(url ?? "/", "http://x");
  return fingerprint((method ?? "").toUpperCase(), decodeURIComponent(u.pathname), u.search.slice(1), body);
}
