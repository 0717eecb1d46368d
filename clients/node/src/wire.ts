/**
 * The hotkeyd wire format v1 (spec/schema, docs/wire-format.md): notifications on the
 * events channel, snapshots, invalidations and demand reports.
 */
import { isUtf8 } from "node:buffer";

export const WIRE_VERSION = 1;

/** A message that does not follow the wire format. */
export class WireError extends Error {
  override name = "WireError";
}

/** Redis names of one deployment. Keys carry the prefix as a Cluster hash tag. */
export class Namespace {
  constructor(
    readonly prefix = "hotkeyd",
    readonly channelOverride?: string,
  ) {}
  get eventsChannel(): string {
    return this.channelOverride ?? `${this.prefix}:events`;
  }
  get invalidateChannel(): string {
    return `${this.prefix}:invalidate`;
  }
  demandChannel(instance: string): string {
    return `${this.prefix}:demand:${instance}`;
  }
  get instances(): string {
    return `{${this.prefix}}:instances`;
  }
  snapshot(instance: string): string {
    return `{${this.prefix}}:snapshot:${instance}`;
  }
}

/** A key as hotkeyd identifies it: its bytes and its logical database. */
export interface Key {
  bytes: Buffer;
  db: number;
}

export interface HotEntry extends Key {
  rate: number;
  rule: string;
  ttlMs: number;
  since: number;
  kind?: string;
}

export interface CoolEntry extends Key {
  rule: string;
}

export interface Message {
  instance: string;
  seq: number;
  ts: number;
  full: boolean;
  final: boolean;
  hot: HotEntry[];
  cool: CoolEntry[];
}

export interface WireKey {
  key: string;
  enc?: "base64";
  db?: number;
}

/** Text when the bytes are UTF-8, base64 with enc otherwise. */
export function encodeKey(key: Uint8Array): WireKey {
  const b = Buffer.from(key.buffer, key.byteOffset, key.byteLength);
  return isUtf8(b) ? { key: b.toString("utf8") } : { key: b.toString("base64"), enc: "base64" };
}

const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function decodeKey(obj: unknown): Buffer {
  if (typeof obj !== "object" || obj === null) throw new WireError("entry is not an object");
  const { key, enc } = obj as Record<string, unknown>;
  if (typeof key !== "string") throw new WireError("entry has no string 'key'");
  if (enc === undefined || enc === null || enc === "utf-8") return Buffer.from(key, "utf8");
  if (enc === "base64") {
    if (!B64.test(key)) throw new WireError("invalid base64 key");
    return Buffer.from(key, "base64");
  }
  throw new WireError(`unknown key encoding ${JSON.stringify(enc)}`);
}

function dbOf(o: Record<string, unknown>): number {
  const db = o.db ?? 0;
  if (typeof db !== "number" || !Number.isInteger(db) || db < 0 || db > 1 << 20) {
    throw new WireError(`bad db ${JSON.stringify(db)}`);
  }
  return db;
}

/**
 * Parse a notification or a snapshot; throws WireError when anything is malformed
 * (a bad message is counted by the caller and changes nothing).
 */
export function decodeMessage(data: string | Buffer): Message {
  let obj: unknown;
  try {
    obj = JSON.parse(typeof data === "string" ? data : data.toString("utf8"));
  } catch (e) {
    throw new WireError(`notification is not JSON: ${(e as Error).message}`);
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) throw new WireError("notification is not an object");
  const o = obj as Record<string, unknown>;
  if (o.v !== WIRE_VERSION) throw new WireError(`unsupported wire version ${JSON.stringify(o.v)}`);
  const { instance, seq, ts } = o;
  if (typeof instance !== "string" || instance === "") throw new WireError("missing instance");
  if (typeof seq !== "number" || !Number.isSafeInteger(seq) || seq < 0) throw new WireError("seq is not a non-negative integer below 2^53");
  if (typeof ts !== "number" || !Number.isFinite(ts)) throw new WireError("missing ts");
  const hotRaw = o.hot ?? [];
  const coolRaw = o.cool ?? [];
  if (!Array.isArray(hotRaw) || !Array.isArray(coolRaw)) throw new WireError("'hot'/'cool' are not lists");
  const hot: HotEntry[] = hotRaw.map((h: unknown) => {
    if (typeof h !== "object" || h === null) throw new WireError("hot entry is not an object");
    const e = h as Record<string, unknown>;
    if (typeof e.rate !== "number" || typeof e.rule !== "string" || typeof e.ttl_ms !== "number" || !Number.isInteger(e.ttl_ms) || e.ttl_ms < 0) {
      throw new WireError("bad hot entry");
    }
    const entry: HotEntry = {
      bytes: decodeKey(e), db: dbOf(e), rate: e.rate, rule: e.rule, ttlMs: e.ttl_ms,
      since: typeof e.since === "number" ? e.since : 0,
    };
    if (typeof e.kind === "string") entry.kind = e.kind;
    return entry;
  });
  const cool: CoolEntry[] = coolRaw.map((c: unknown) => {
    if (typeof c !== "object" || c === null) throw new WireError("cool entry is not an object");
    const e = c as Record<string, unknown>;
    return { bytes: decodeKey(e), db: dbOf(e), rule: typeof e.rule === "string" ? e.rule : "" };
  });
  return { instance, seq, ts, full: o.full === true, final: o.final === true, hot, cool };
}

export function encodeInvalidation(origin: string, keys: Uint8Array[]): string {
  return JSON.stringify({ v: 1, origin, keys: keys.map(encodeKey) });
}

export function decodeInvalidation(payload: string | Buffer): { origin: string; keys: Buffer[] } {
  let obj: unknown;
  try {
    obj = JSON.parse(typeof payload === "string" ? payload : payload.toString("utf8"));
  } catch (e) {
    throw new WireError(`invalidation is not JSON: ${(e as Error).message}`);
  }
  if (typeof obj !== "object" || obj === null || Array.isArray(obj)) throw new WireError("invalidation is not an object");
  const o = obj as Record<string, unknown>;
  if (o.v !== 1 || !Array.isArray(o.keys)) throw new WireError("invalidation is not a v1 object with a 'keys' list");
  return { origin: typeof o.origin === "string" ? o.origin : "", keys: o.keys.map(decodeKey) };
}

/** Most entries in one demand report; the heaviest are kept. */
export const MAX_DEMAND_ENTRIES = 1000;
const MAX_DEMAND_COUNT = 2 ** 32 - 1;

/** What a cache served locally for one key in one interval, and who announced the key. */
export interface DemandRead extends Key {
  n: number;
  instance: string;
}

export interface DemandReport {
  instance: string;
  seq: number;
  payload: string;
  entries: number;
  /** Reads not carried: beyond the heaviest MAX_DEMAND_ENTRIES, or above 2^32-1. */
  dropped: number;
}

/** One report per daemon instance (wire format demand-v1), numbered from nextSeq. */
export function buildDemandReports(app: string, nextSeq: number, ts: number, intervalMs: number, reads: DemandRead[]): DemandReport[] {
  const byInst = new Map<string, DemandRead[]>();
  for (const r of reads) {
    let list = byInst.get(r.instance);
    if (!list) byInst.set(r.instance, (list = []));
    list.push(r);
  }
  const out: DemandReport[] = [];
  for (const instance of [...byInst.keys()].sort()) {
    const items = byInst.get(instance)!.sort((a, b) => b.n - a.n || Buffer.compare(a.bytes, b.bytes) || a.db - b.db);
    let dropped = 0;
    for (const it of items.slice(MAX_DEMAND_ENTRIES)) dropped += it.n;
    const kept = items.slice(0, MAX_DEMAND_ENTRIES);
    const entries = kept.map((it) => {
      const e: Record<string, unknown> = { ...encodeKey(it.bytes) };
      if (it.db !== 0) e.db = it.db;
      let n = it.n;
      if (n > MAX_DEMAND_COUNT) {
        dropped += n - MAX_DEMAND_COUNT;
        n = MAX_DEMAND_COUNT;
      }
      e.n = n;
      return e;
    });
    const payload = JSON.stringify({ v: 1, type: "demand", app, seq: nextSeq, ts, interval_ms: intervalMs, entries });
    out.push({ instance, seq: nextSeq, payload, entries: kept.length, dropped });
    nextSeq++;
  }
  return out;
}
