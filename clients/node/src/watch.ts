/**
 * The app side of the daemon's watch (docs/consistency.md): heartbeats, strict or
 * available serving, and the intake every invalidation goes through. The decisions are
 * pinned by spec/vectors/watch.json (test/watch.test.ts runs it), the same in every SDK.
 */
import calculateSlot from "cluster-key-slot";
import type { MessageAuth } from "./auth.js";
import type { Clock, HotSet } from "./hotset.js";
import { limit } from "./limits.js";
import { decodeInvalidation, parseStrict, WireError } from "./wire.js";

/** "available" (the default): copies live until their TTL, lapses are counted; "strict":
 * a copy is served only while the watch of its node vouches for it. */
export type Consistency = "available" | "strict";

export const WATCH_LEASE_MS = limit("watch_lease_ms");
const KEY_INTERVAL_MS = limit("invalidation_key_interval_ms");
const INVALIDATION_BYTES_MAX = limit("invalidation_bytes_max");
const INVALIDATION_KEYS_MAX = limit("invalidation_keys_max");
const SEQ_MAX = limit("seq_max");
const NAME_MAX = limit("name_chars_max");
const SKEW_S = limit("clock_skew_s_max");
const EPS = 1e-6;

export interface Heartbeat {
  instance: string;
  node: string;
  epoch: number;
  up: boolean;
  armed: number;
  ts: number;
  /** null: a plain node, covering every key */
  slots: [number, number][] | null;
}

function covers(hb: Heartbeat, slot: number): boolean {
  return hb.slots === null || hb.slots.some(([a, b]) => a <= slot && slot <= b);
}

function int(obj: Record<string, unknown>, name: string, dflt?: number): number {
  const v = name in obj ? obj[name] : dflt;
  if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > SEQ_MAX) throw new WireError(`heartbeat ${name} must be an integer in [0, seq_max]`);
  return v;
}

function name(obj: Record<string, unknown>, n: string): string {
  const v = obj[n];
  if (typeof v !== "string" || v === "" || [...v].length > NAME_MAX) throw new WireError(`heartbeat ${n} must be a string of 1..${NAME_MAX} characters`);
  return v;
}

/** Validate one heartbeat (already verified when auth is on); nowS: the receiver's unix time. */
export function decodeHeartbeat(payload: string | Buffer, nowS: number): Heartbeat {
  const obj = parseStrict(payload, "heartbeat") as Record<string, unknown>;
  if (obj === null || typeof obj !== "object" || Array.isArray(obj) || obj.v !== 1) throw new WireError("heartbeat is not a v1 object");
  const ts = obj.ts;
  if (typeof ts !== "number" || !Number.isFinite(ts) || ts < 0) throw new WireError("heartbeat ts must be a finite number >= 0");
  if (ts > nowS + SKEW_S) throw new WireError("heartbeat ts is too far ahead of this clock");
  if (typeof obj.up !== "boolean") throw new WireError("heartbeat up must be a boolean");
  let slots: [number, number][] | null = null;
  if ("slots" in obj) {
    if (!Array.isArray(obj.slots)) throw new WireError("heartbeat slots must be a list");
    slots = obj.slots.map((r: unknown) => {
      if (!Array.isArray(r) || r.length !== 2 || !r.every((x) => Number.isInteger(x)) || !(0 <= r[0] && r[0] <= r[1] && r[1] <= 16383)) {
        throw new WireError("bad slot range");
      }
      return [r[0], r[1]] as [number, number];
    });
  }
  return {
    instance: name(obj, "instance"), node: name(obj, "node"), epoch: int(obj, "epoch"),
    up: obj.up, armed: int(obj, "armed", 0), ts, slots,
  };
}

export interface WatchStats {
  heartbeats: number;
  badHeartbeats: number;
  /** a node's watch reconnected: every copy dropped */
  epochChanges: number;
  /** reads of a hot key the watch did not vouch for */
  lapsed: number;
  /** of those, reads strict mode sent to Redis uncached */
  strictMisses: number;
  unwatchedCopies: number;
}

/** What a copy was fetched under: [instance, [[node, epoch], ...]]. */
export type Guard = [string, [string, number][]];

/** The latest heartbeat per (instance, node); times in ms of one monotonic clock. */
export class WatchLeases {
  readonly stats: WatchStats = { heartbeats: 0, badHeartbeats: 0, epochChanges: 0, lapsed: 0, strictMisses: 0, unwatchedCopies: 0 };
  clustered = false;
  private latest = new Map<string, { hb: Heartbeat; at: number }>();

  constructor(readonly leaseMs = WATCH_LEASE_MS) {}

  get seen(): boolean {
    return this.latest.size > 0;
  }

  /** Record a heartbeat; true when the node's epoch changed (drop every copy). */
  heard(hb: Heartbeat, at: number): boolean {
    this.stats.heartbeats++;
    if (hb.slots !== null) this.clustered = true;
    const k = hb.instance + "\u0000" + hb.node;
    const prev = this.latest.get(k);
    this.latest.set(k, { hb, at });
    if (prev !== undefined && prev.hb.epoch !== hb.epoch) {
      this.stats.epochChanges++;
      return true;
    }
    return false;
  }

  forget(): void {
    this.latest.clear();
  }

  /** The guard of a read in slot beginning at now; hot: [instance, seq that made it hot]. */
  guard(slot: number, hot: [string, number][], now: number): Guard | null {
    for (const [instance, seq] of hot) {
      const nodes: [string, number][] = [];
      let ok = true;
      for (const { hb, at } of this.latest.values()) {
        if (hb.instance !== instance || !covers(hb, slot)) continue;
        if (!hb.up || now - at >= this.leaseMs - EPS || hb.armed < seq) {
          ok = false;
          break;
        }
        nodes.push([hb.node, hb.epoch]);
      }
      if (ok && nodes.length > 0) return [instance, nodes.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))];
    }
    return null;
  }

  /** Every node of the guard is fresh, up, still covers slot and carries its epoch. */
  serves(g: Guard | null | undefined, slot: number, now: number): boolean {
    if (!g) return false;
    for (const [node, epoch] of g[1]) {
      const e = this.latest.get(g[0] + "\u0000" + node);
      if (e === undefined || !e.hb.up || e.hb.epoch !== epoch || now - e.at >= this.leaseMs - EPS || !covers(e.hb, slot)) return false;
    }
    return true;
  }
}

export interface IntakeStats {
  applied: number;
  deferred: number;
  oversized: number;
  unsigned: number;
  bad: number;
}

/** Size cap, signature, per-key interval; early drops are deferred, never lost. */
export class InvalidationIntake {
  readonly stats: IntakeStats = { applied: 0, deferred: 0, oversized: 0, unsigned: 0, bad: 0 };
  readonly pending = new Map<string, number>(); // key (latin1 of the bytes) -> when it applies
  private last = new Map<string, number>();

  constructor(
    readonly auth?: MessageAuth,
    readonly intervalMs = KEY_INTERVAL_MS,
  ) {}

  /** The keys whose copies drop now; undefined when the message was dropped (counted). */
  receive(payload: Buffer, now: number): Buffer[] | undefined {
    if (payload.length > INVALIDATION_BYTES_MAX) {
      this.stats.oversized++;
      return undefined;
    }
    if (this.auth) {
      const body = this.auth.verify(payload);
      if (body === undefined) {
        this.stats.unsigned++;
        return undefined;
      }
      payload = body;
    }
    let keys: Buffer[];
    try {
      keys = decodeInvalidation(payload).keys;
    } catch {
      this.stats.bad++;
      return undefined;
    }
    if (keys.length > INVALIDATION_KEYS_MAX) {
      this.stats.oversized++;
      return undefined;
    }
    return keys.filter((k) => this.arrive(k.toString("latin1"), now));
  }

  arrive(k: string, now: number): boolean {
    const at = this.pending.get(k);
    if (at !== undefined) {
      if (at > now + EPS) return false; // coalesced into the deferred drop
      this.pending.delete(k);
      this.applied(k, now);
      return true;
    }
    const last = this.last.get(k);
    if (last === undefined || now - last >= this.intervalMs - EPS) {
      this.applied(k, now);
      return true;
    }
    this.pending.set(k, last + this.intervalMs);
    this.stats.deferred++;
    return false;
  }

  /** At a read of k: true when its deferred drop applies now. */
  due(k: string, now: number): boolean {
    const at = this.pending.get(k);
    if (at === undefined || at > now + EPS) return false;
    this.pending.delete(k);
    this.applied(k, now);
    return true;
  }

  private applied(k: string, at: number): void {
    this.stats.applied++;
    if (this.last.size >= 100_000) for (const [key, t] of this.last) if (t <= at - this.intervalMs) this.last.delete(key);
    this.last.set(k, at);
  }
}

/** A cache's consistency mode (the twin of hotkeyd.client.consistency.WatchGate). */
export class WatchGate {
  readonly strict: boolean;
  readonly leases = new WatchLeases();
  readonly intake: InvalidationIntake;
  private guards = new Map<string, Guard>();

  constructor(
    readonly mode: Consistency,
    private readonly hotSet: HotSet,
    private readonly clock: Clock,
    private readonly auth: MessageAuth | undefined,
    private readonly drop: (k: Buffer) => void,
    private readonly dropAll: () => void,
  ) {
    if (mode !== "available" && mode !== "strict") throw new RangeError(`consistency must be 'available' or 'strict', got ${String(mode)}`);
    this.strict = mode === "strict";
    this.intake = new InvalidationIntake(auth);
  }

  get stats(): WatchStats {
    return this.leases.stats;
  }

  onInvalidation(payload: Buffer): boolean {
    const keys = this.intake.receive(payload, this.clock.now());
    if (keys === undefined) return false;
    for (const k of keys) this.drop(k);
    return true;
  }

  onHeartbeat(payload: Buffer): void {
    if (this.auth) {
      const body = this.auth.verify(payload);
      if (body === undefined) {
        this.stats.badHeartbeats++;
        return;
      }
      payload = body;
    }
    let hb: Heartbeat;
    try {
      hb = decodeHeartbeat(payload, Date.now() / 1000);
    } catch {
      this.stats.badHeartbeats++;
      return;
    }
    if (this.leases.heard(hb, this.clock.now())) {
      this.guards.clear();
      this.dropAll(); // the node's watch reconnected: a write in the gap may be unseen
    }
  }

  reset(): void {
    this.leases.forget();
    this.guards.clear();
  }

  private slot(k: Buffer): number {
    return this.leases.clustered ? calculateSlot(k) : 0;
  }

  /** May the local copy under ck (if any) be served now? */
  /** At any read of k: apply its deferred invalidation if its turn came. */
  settle(k: Buffer, now: number): void {
    if (this.intake.pending.size > 0 && this.intake.due(k.toString("latin1"), now)) this.drop(k);
  }

  admit(ck: string, k: Buffer, now: number): boolean {
    this.settle(k, now);
    if (!this.strict && !this.leases.seen) return true;
    if (this.leases.serves(this.guards.get(ck), this.slot(k), now)) return true;
    this.stats.lapsed++;
    return !this.strict;
  }

  /** Record the guard of a fetch beginning now; false: read Redis, do not cache. */
  beforeFetch(ck: string, k: Buffer, db: number, now: number): boolean {
    if (!this.strict && !this.leases.seen) return true;
    const g = this.leases.guard(this.slot(k), this.hotSet.hotSince(k, db), now);
    if (g === null) {
      this.guards.delete(ck);
      this.stats.unwatchedCopies++;
      if (this.strict) {
        this.stats.strictMisses++;
        return false;
      }
      return true;
    }
    const old = this.guards.get(ck);
    if (old === undefined || JSON.stringify(old) !== JSON.stringify(g)) {
      if (this.strict) this.drop(k); // a copy (or a fetch in flight) under an older guard must not stay
      if (this.guards.size >= 100_000) this.guards.clear();
      this.guards.set(ck, g);
    }
    return true;
  }
}
