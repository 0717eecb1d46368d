/**
 * The client's view of which keys are hot, merged over every daemon instance
 * (the same rules as every hotkeyd client; spec/vectors/hotset.json pins them).
 */
import { isUtf8 } from "node:buffer";
import type { CoolEntry, HotEntry, Key, Message } from "./wire.js";
import { limit } from "./limits.js";

/** Monotonic time source in milliseconds; tests pass a manual one. */
export interface Clock {
  now(): number;
}

export const systemClock: Clock = { now: () => performance.now() };

export type ApplyResult = "applied" | "stale" | "gap" | "refused";

export interface HotItem {
  entry: HotEntry;
  /** monotonic ms after which the key is no longer hot */
  expires: number;
  /** the instance that most recently announced it (demand reports go there) */
  owner: string;
}

export interface HotSetOptions {
  clock?: Clock;
  /** announcements of new keys beyond this are dropped and counted (100000) */
  maxKeys?: number;
  /** keys one instance may hold (10000); more are dropped and counted */
  maxKeysPerInstance?: number;
  /** a new instance beyond this (10000) is refused and counted */
  maxInstances?: number;
  /** ms after which a silent instance holding no keys is forgotten (300000) */
  forgetIdleMs?: number;
  /** cap on an announced ttl_ms (60000): a forged TTL cannot pin a value for long */
  maxTtlMs?: number;
  /** a full message further ahead than this (1000) is a gap, checked against the snapshot */
  maxSeqJump?: number;
}

interface InstanceState {
  seq: number | null;
  ts: number;
  final: boolean;
  seen: number;
  keys: Map<string, number>; // key id -> expiry
  since: Map<string, number>; // key id -> seq of the announcement that made it hot here
}

/** Map key of (bytes, db): text keys as themselves, binary keys as latin1, per db. */
export function keyId(bytes: Buffer, db: number): string {
  const s = isUtf8(bytes) ? "t" + bytes.toString("utf8") : "b" + bytes.toString("latin1");
  return db === 0 ? s : `${db}\u0000${s}`;
}

export class HotSet {
  readonly clock: Clock;
  private readonly maxKeys: number;
  private readonly maxInstances: number;
  private readonly forgetIdleMs: number;
  private readonly maxTtlMs: number;
  private readonly maxKeysPerInstance: number;
  readonly maxSeqJump: number;
  private scannedAt = -1e12;
  /** db -> text key -> item: the lookup a string read does, with no allocation */
  private readonly text = new Map<number, Map<string, HotItem>>();
  private readonly items = new Map<string, HotItem>();
  private readonly instances = new Map<string, InstanceState>();
  private readonly onHot: ((e: HotEntry) => void)[] = [];
  private readonly onCool: ((k: Key) => void)[] = [];
  dropped = 0;
  forgotten = 0;
  clamped = 0;
  refused = 0;
  callbackErrors = 0;

  constructor(opts: HotSetOptions = {}) {
    this.clock = opts.clock ?? systemClock;
    this.maxKeys = opts.maxKeys ?? limit("hotset_keys_max");
    this.maxInstances = opts.maxInstances ?? limit("hotset_instances_max");
    this.forgetIdleMs = opts.forgetIdleMs ?? limit("hotset_forget_idle_s") * 1000;
    this.maxTtlMs = opts.maxTtlMs ?? limit("hotset_ttl_ms_max");
    this.maxKeysPerInstance = opts.maxKeysPerInstance ?? limit("hotset_keys_per_instance_max");
    this.maxSeqJump = opts.maxSeqJump ?? limit("seq_jump_max");
  }

  addListener(l: { onHot?: (e: HotEntry) => void; onCool?: (k: Key) => void }): void {
    if (l.onHot) this.onHot.push(l.onHot);
    if (l.onCool) this.onCool.push(l.onCool);
  }

  /** The item of a text key if it is hot now (the hot path: one or two map lookups). */
  getText(key: string, db = 0): HotItem | undefined {
    const it = this.text.get(db)?.get(key);
    return it !== undefined && it.expires > this.clock.now() ? it : undefined;
  }

  get(bytes: Buffer, db = 0): HotItem | undefined {
    const it = this.items.get(keyId(bytes, db));
    return it !== undefined && it.expires > this.clock.now() ? it : undefined;
  }

  keys(): Key[] {
    const now = this.clock.now();
    const out: Key[] = [];
    for (const it of this.items.values()) if (it.expires > now) out.push({ bytes: it.entry.bytes, db: it.entry.db });
    return out;
  }

  get size(): number {
    return this.items.size;
  }

  lastSeq(instance: string): number | null {
    return this.instances.get(instance)?.seq ?? null;
  }

  apply(msg: Message, force = false): ApplyResult {
    const now = this.clock.now();
    const turned: HotEntry[] = [];
    const cooled: Key[] = [];
    let st = this.instances.get(msg.instance);
    if (st === undefined && !this.roomForInstance(now)) {
      this.refused++;
      return "refused";
    }
    if (msg.full) {
      if (st !== undefined && st.seq !== null && !newerFull(st, msg)) return "stale";
      if (st !== undefined && st.seq !== null && msg.seq > st.seq + this.maxSeqJump && !force) return "gap";
      if (st === undefined) this.instances.set(msg.instance, (st = newState()));
      const old = st.keys;
      st.keys = new Map();
      this.announce(msg.instance, st, msg, now, turned);
      for (const id of old.keys()) {
        if (!st.keys.has(id)) {
          st.since.delete(id);
          this.withdraw(id, now, cooled);
        }
      }
    } else {
      if (st !== undefined && st.seq !== null && msg.seq <= st.seq) return "stale";
      const gap = st === undefined || st.seq === null || msg.seq !== st.seq + 1;
      if (gap && !force) return "gap";
      if (st === undefined) this.instances.set(msg.instance, (st = newState()));
      this.announce(msg.instance, st, msg, now, turned);
      for (const c of msg.cool) {
        const id = keyId(c.bytes, c.db);
        st.since.delete(id);
        if (st.keys.delete(id)) this.withdraw(id, now, cooled);
      }
    }
    st.seq = msg.seq;
    st.ts = msg.ts;
    st.final = msg.final;
    st.seen = now;
    this.notify(turned, cooled);
    return "applied";
  }

  /** Drop keys whose TTL ran out; returns how many cooled. */
  expire(): number {
    const now = this.clock.now();
    const cooled: Key[] = [];
    for (const st of this.instances.values()) {
      for (const [id, exp] of st.keys) {
        if (exp <= now) {
          st.keys.delete(id);
          st.since.delete(id);
        }
      }
    }
    for (const [id, it] of this.items) if (it.expires <= now) this.withdraw(id, now, cooled);
    this.forgetInstances(now, false);
    this.notify([], cooled);
    return cooled.length;
  }

  /** [instance, seq of the announcement that made the key hot there] per instance holding
   * it now, by instance name: what a strict read's guard checks the watch's armed against. */
  hotSince(bytes: Buffer, db: number): [string, number][] {
    const id = keyId(bytes, db);
    const now = this.clock.now();
    const out: [string, number][] = [];
    for (const [name, st] of this.instances) {
      const exp = st.keys.get(id);
      const seq = st.since.get(id);
      if (exp !== undefined && exp > now && seq !== undefined) out.push([name, seq]);
    }
    return out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  }

  clear(): void {
    const cooled = [...this.items.values()].map((it) => ({ bytes: it.entry.bytes, db: it.entry.db }));
    this.items.clear();
    this.text.clear();
    this.instances.clear();
    this.notify([], cooled);
  }

  /** Whether a new instance may be tracked; at the cap, a scan at most once a second. */
  private roomForInstance(now: number): boolean {
    if (this.instances.size < this.maxInstances) return true;
    if (now - this.scannedAt >= 1000) {
      this.scannedAt = now;
      this.forgetInstances(now, true);
    }
    return this.instances.size < this.maxInstances;
  }

  private announce(name: string, st: InstanceState, msg: Message, now: number, turned: HotEntry[]): void {
    for (let h of msg.hot) {
      if (h.ttlMs > this.maxTtlMs) {
        h = { ...h, ttlMs: this.maxTtlMs };
        this.clamped++;
      }
      const id = keyId(h.bytes, h.db);
      if (!st.keys.has(id) && st.keys.size >= this.maxKeysPerInstance) {
        this.dropped++;
        continue;
      }
      const exp = now + h.ttlMs;
      const it = this.items.get(id);
      if (it === undefined) {
        if (this.items.size >= this.maxKeys) {
          this.dropped++;
          continue;
        }
        const item: HotItem = { entry: h, expires: exp, owner: name };
        this.items.set(id, item);
        if (isUtf8(h.bytes)) {
          let m = this.text.get(h.db);
          if (!m) this.text.set(h.db, (m = new Map()));
          m.set(h.bytes.toString("utf8"), item);
        }
        turned.push(h);
      } else {
        it.entry = h;
        it.expires = it.expires > now ? Math.max(it.expires, exp) : exp;
        it.owner = name;
      }
      st.keys.set(id, exp);
      if (!st.since.has(id)) st.since.set(id, msg.seq);
    }
  }

  private withdraw(id: string, now: number, cooled: Key[]): void {
    let best = 0;
    let bestOwner = "";
    for (const [name, st] of this.instances) {
      const exp = st.keys.get(id);
      if (exp !== undefined && exp > best) {
        best = exp;
        bestOwner = name;
      }
    }
    const it = this.items.get(id);
    if (it === undefined) return;
    if (best > now) {
      it.expires = best;
      it.owner = bestOwner;
      return;
    }
    this.items.delete(id);
    const { bytes, db } = it.entry;
    if (isUtf8(bytes)) this.text.get(db)?.delete(bytes.toString("utf8"));
    cooled.push({ bytes, db });
  }

  private forgetInstances(now: number, overCap: boolean): void {
    let idle = [...this.instances]
      .filter(([, st]) => st.keys.size === 0 && (st.final || now - st.seen >= this.forgetIdleMs || overCap))
      .map(([name, st]) => ({ name, seen: st.seen }));
    if (overCap) idle = idle.sort((a, b) => a.seen - b.seen).slice(0, Math.max(1, this.instances.size - this.maxInstances + 1));
    for (const { name } of idle) this.instances.delete(name);
    this.forgotten += idle.length;
  }

  private notify(turned: HotEntry[], cooled: Key[]): void {
    for (const e of turned) for (const cb of this.onHot) this.call(() => cb(e));
    for (const k of cooled) for (const cb of this.onCool) this.call(() => cb(k));
  }

  private call(f: () => void): void {
    try {
      f();
    } catch {
      this.callbackErrors++;
    }
  }
}

function newState(): InstanceState {
  return { seq: null, ts: 0, final: false, seen: 0, keys: new Map(), since: new Map() };
}

function newerFull(st: InstanceState, msg: Message): boolean {
  return msg.seq > st.seq! || (msg.seq < st.seq! && msg.ts > st.ts);
}

export type { CoolEntry };
