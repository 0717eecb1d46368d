/**
 * The hotkeyd wire format v1 (spec/schema, docs/wire-format.md): notifications on the
 * events channel, snapshots, invalidations and demand reports.
 */
import { isUtf8 } from "node:buffer";
import { limit } from "./limits.js";

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
  /** the daemon's watch heartbeats, one per data node every 100 ms */
  get watchChannel(): string {
    return `${this.prefix}:watch`;
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
  if (typeof enc !== "string") throw new WireError("enc must be a string");
  if (enc === "base64") {
    if (!B64.test(key)) throw new WireError("invalid base64 key");
    return Buffer.from(key, "base64");
  }
  throw new WireError(`unknown key encoding ${JSON.stringify(enc)}`);
}

/** Limits of the wire format (spec/limits.json; docs/wire-format.md, "Untrusted input"). */
export const MAX_SEQ = limit("seq_max");
/** Deepest nesting of arrays and objects a message may have (spec/vectors/hostile.json). */
export const MAX_DEPTH = limit("json_depth_max");
export const MAX_TTL_MS = limit("ttl_ms_max");
export const MAX_ENTRIES = limit("message_entries_max");
const MAX_NAME = limit("name_chars_max");
const MAX_DB = limit("db_max");

type Obj = Record<string, unknown>;
const isObj = (v: unknown): v is Obj => typeof v === "object" && v !== null && !Array.isArray(v);

function int(o: Obj, name: string, lo: number, hi: number, def?: number): number {
  const v = name in o ? o[name] : def;
  if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) throw new WireError(`${name} must be an integer in [${lo}, ${hi}]`);
  return v;
}

function num(o: Obj, name: string, def?: number): number {
  const v = name in o ? o[name] : def;
  if (typeof v !== "number" || !Number.isFinite(v) || v < 0) throw new WireError(`${name} must be a finite number >= 0`);
  return v;
}

function str(o: Obj, name: string, def?: string): string {
  const v = name in o ? o[name] : def;
  if (typeof v !== "string" || [...v].length > MAX_NAME) throw new WireError(`${name} must be a string of at most ${MAX_NAME} characters`);
  return v;
}

function hotEntry(e: unknown): HotEntry {
  if (!isObj(e)) throw new WireError("hot entry is not an object");
  const kind = e.kind ?? undefined;
  if (kind !== undefined && kind !== "read" && kind !== "write" && kind !== "mixed") throw new WireError("bad kind");
  const entry: HotEntry = {
    bytes: decodeKey(e), db: int(e, "db", 0, MAX_DB, 0), rate: num(e, "rate"), rule: str(e, "rule"),
    ttlMs: int(e, "ttl_ms", 0, MAX_TTL_MS), since: num(e, "since", 0),
  };
  if (kind !== undefined) entry.kind = kind;
  return entry;
}

function coolEntry(e: unknown): CoolEntry {
  if (!isObj(e)) throw new WireError("cool entry is not an object");
  return { bytes: decodeKey(e), db: int(e, "db", 0, MAX_DB, 0), rule: str(e, "rule", "") };
}

/**
 * Parse and validate a notification or snapshot. Whatever the input, it returns or throws
 * WireError: the envelope must be valid; a bad entry is left out and counted in
 * `skipped`, as are entries beyond MAX_ENTRIES.
 */
export function decodeMessage(data: string | Buffer): Message & { skipped: number } {
  const obj = parseStrict(data, "notification");
  if (!isObj(obj)) throw new WireError("notification is not a JSON object");
  if (obj.v !== WIRE_VERSION) throw new WireError(`unsupported wire version ${JSON.stringify(obj.v)}`);
  const instance = obj.instance;
  if (typeof instance !== "string" || instance === "" || [...instance].length > MAX_NAME) throw new WireError("bad instance");
  const seq = int(obj, "seq", 0, MAX_SEQ);
  const ts = num(obj, "ts");
  const full = obj.full ?? false;
  const final = obj.final ?? false;
  if (typeof full !== "boolean" || typeof final !== "boolean") throw new WireError("full and final must be true or false");
  const lists = ["hot", "cool", "top"].map((n) => (n in obj ? obj[n] : []));
  if (!lists.every((l) => Array.isArray(l))) throw new WireError("hot, cool and top must be lists");
  let [hotRaw, coolRaw] = lists as unknown[][];
  const topRaw = lists[2] as unknown[];
  let skipped = 0;
  if (hotRaw.length + coolRaw.length > MAX_ENTRIES) {
    skipped = hotRaw.length + coolRaw.length - MAX_ENTRIES;
    hotRaw = hotRaw.slice(0, MAX_ENTRIES);
    coolRaw = coolRaw.slice(0, MAX_ENTRIES - hotRaw.length);
  }
  const hot: HotEntry[] = [];
  const cool: CoolEntry[] = [];
  for (const e of hotRaw) {
    try {
      hot.push(hotEntry(e));
    } catch {
      skipped++;
    }
  }
  for (const e of coolRaw) {
    try {
      cool.push(coolEntry(e));
    } catch {
      skipped++;
    }
  }
  skipped += topRaw.filter((t) => !isObj(t)).length;
  return { instance, seq, ts, full, final, hot, cool, skipped };
}

export function encodeInvalidation(origin: string, keys: Uint8Array[]): string {
  return JSON.stringify({ v: 1, origin, keys: keys.map(encodeKey) });
}

export function decodeInvalidation(payload: string | Buffer): { origin: string; keys: Buffer[] } {
  const obj = parseStrict(payload, "invalidation");
  if (!isObj(obj)) throw new WireError("invalidation is not an object");
  if (obj.v !== 1 || !Array.isArray(obj.keys)) throw new WireError("invalidation is not a v1 object with a 'keys' list");
  const keys = obj.keys.map((k: unknown) => {
    if (!isObj(k)) throw new WireError("bad key entry");
    int(k, "db", 0, MAX_DB, 0);
    return decodeKey(k);
  });
  return { origin: typeof obj.origin === "string" ? obj.origin : "", keys };
}

/** Most entries in one demand report; the heaviest are kept. */
export const MAX_DEMAND_ENTRIES = limit("demand_entries_max");
const MAX_DEMAND_COUNT = limit("count_max");
/** Largest demand report (bytes): receivers drop a larger one whole. */
export const MAX_DEMAND_BYTES = limit("demand_report_bytes_max");

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

/**
 * One report per daemon instance (wire format demand-v1), numbered from nextSeq, each at
 * most maxBytes long (less the signature's SIGNATURE_BYTES when it will be signed).
 */
export function buildDemandReports(
  app: string, nextSeq: number, ts: number, intervalMs: number, reads: DemandRead[], maxBytes = MAX_DEMAND_BYTES,
): DemandReport[] {
  const byInst = new Map<string, DemandRead[]>();
  for (const r of reads) {
    let list = byInst.get(r.instance);
    if (!list) byInst.set(r.instance, (list = []));
    list.push(r);
  }
  const out: DemandReport[] = [];
  for (const instance of [...byInst.keys()].sort()) {
    const items = byInst.get(instance)!.sort((a, b) => b.n - a.n || Buffer.compare(a.bytes, b.bytes) || a.db - b.db);
    let keep = Math.min(items.length, MAX_DEMAND_ENTRIES);
    let payload = encodeDemand(app, nextSeq, ts, intervalMs, items.slice(0, keep));
    // Long keys: halve (heaviest kept) until it fits; receivers drop a larger one whole.
    while (Buffer.byteLength(payload) > maxBytes && keep > 1) {
      keep = Math.floor(keep / 2);
      payload = encodeDemand(app, nextSeq, ts, intervalMs, items.slice(0, keep));
    }
    const kept = items.slice(0, keep);
    let dropped = 0;
    for (const it of items.slice(keep)) dropped += it.n;
    for (const it of kept) dropped += Math.max(0, it.n - MAX_DEMAND_COUNT);
    out.push({ instance, seq: nextSeq, payload, entries: kept.length, dropped });
    nextSeq++;
  }
  return out;
}

function encodeDemand(app: string, seq: number, ts: number, intervalMs: number, kept: DemandRead[]): string {
  const entries = kept.map((it) => {
    const e: Record<string, unknown> = { ...encodeKey(it.bytes) };
    if (it.db !== 0) e.db = it.db;
    e.n = Math.min(it.n, MAX_DEMAND_COUNT);
    return e;
  });
  return JSON.stringify({ v: 1, type: "demand", app, seq, ts, interval_ms: intervalMs, entries });
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
// strings (skipped) or number tokens, outside strings
const TOKENS = /"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?/g;

/**
 * Parse JSON by the rule every decoder of the contract follows (spec/vectors/hostile.json):
 * invalid UTF-8, an integer outside int64, a number not finite as a double, NaN/Infinity
 * or nesting deeper than MAX_DEPTH reject the document whole, as a WireError.
 */
export function parseStrict(data: string | Buffer, what: string): unknown {
  if (typeof data !== "string" && !isUtf8(data)) throw new WireError(`${what} is not UTF-8`);
  const text = typeof data === "string" ? data : data.toString("utf8");
  let obj: unknown;
  try {
    obj = JSON.parse(text);
  } catch (e) {
    throw new WireError(`${what} is not JSON: ${(e as Error).message}`);
  }
  for (const m of text.matchAll(TOKENS)) {
    const tok = m[0];
    if (tok.startsWith('"')) continue;
    if (/[.eE]/.test(tok)) {
      if (!Number.isFinite(Number(tok))) throw new WireError(`${what}: number ${tok.slice(0, 40)} is not finite`);
    } else if (tok.length > 20 || BigInt(tok) < INT64_MIN || BigInt(tok) > INT64_MAX) {
      throw new WireError(`${what}: integer outside the signed 64-bit range`);
    }
  }
  let depth = 0;
  for (const m of text.matchAll(/"(?:[^"\\]|\\.)*"|[[\]{}]/g)) {
    const c = m[0];
    if (c === "[" || c === "{") {
      if (++depth > MAX_DEPTH) throw new WireError(`${what}: nested deeper than ${MAX_DEPTH}`);
    } else if (c === "]" || c === "}") depth--;
  }
  return obj;
}
