/**
 * Keep a HotSet current from the daemon's events channel.
 *
 * Start-up order closes the race between snapshot and stream: subscribe first (on a
 * connection of our own), wait for the confirmation, then read the snapshots; messages
 * published meanwhile are applied afterwards, and the per-instance sequence numbers make
 * the ones already in a snapshot stale. The same order runs after every reconnect.
 */
import { Cluster, type Redis } from "ioredis";
import type { MessageAuth } from "./auth.js";
import { destroySocket, HomeSubscription } from "./home.js";
import { HotSet, type ApplyResult, type HotSetOptions } from "./hotset.js";
import { decodeInvalidation, decodeMessage, Namespace, WireError, type Message } from "./wire.js";
import { limit } from "./limits.js";

export type RedisLike = Redis | Cluster;

export interface SubscriberStats {
  messages: number;
  applied: number;
  stale: number;
  gaps: number;
  resyncs: number;
  connects: number;
  badMessages: number;
  badEntries: number;
  suspect: number;
  unsigned: number;
  refused: number;
  invalidations: number;
  /** subscriptions found dead by PING (half-open) and replaced */
  halfOpen: number;
  /** subscriptions lost (connection closed or replaced); each dropped every local copy */
  lost: number;
  /**
   * wall time (Date.now()) of the last valid notification, 0 if none: a daemon that stopped
   * shows as a growing age while its keys live out their TTL
   */
  lastNotificationMs: number;
}

/**
 * start() rejects with this when the subscriber was not ready within startTimeoutMs:
 * Redis down, silent or unreachable (spec/failure.md, start_redis_down).
 */
export class HotkeydUnreachableError extends Error {
  override name = "HotkeydUnreachableError";
}

export interface SubscriberOptions {
  namespace?: Namespace;
  hotSet?: HotSetOptions;
  /** reads the daemon's snapshots when it publishes to another db than the app's client */
  snapshotClient?: RedisLike;
  /** called with the keys of every invalidation broadcast */
  onInvalidate?: (origin: string, keys: Buffer[]) => void;
  /** called after every (re)connect: anything cached may have missed invalidations */
  onReset?: () => void;
  /** when set, receives each invalidation's raw payload instead of onInvalidate (a
   * HotCache checks size, signature and rate itself) */
  onInvalidationPayload?: (payload: Buffer) => void;
  /** receives each message of the watch channel (the daemon's heartbeats); unset: not subscribed */
  onHeartbeat?: (payload: Buffer) => void;
  /**
   * start() rejects with HotkeydUnreachableError after this long without a subscription
   * and a bootstrap (start_timeout_ms of spec/limits.json, 5000)
   */
  startTimeoutMs?: number;
  /** instances whose heartbeat is older are ignored (30 s) */
  staleAfterMs?: number;
  /** periodic full resync, a safety net (60 s) */
  resyncEveryMs?: number;
  /** larger messages are dropped unparsed and counted (4 MiB) */
  maxMessageBytes?: number;
  /**
   * after this long without a message the subscription is PINGed; no reply within as long
   * again means a half-open connection, which is replaced (5000 ms; single-node clients)
   */
  healthIntervalMs?: number;
  /** a message whose ts is further ahead of this host's clock is suspect (300000 ms) */
  maxClockSkewMs?: number;
  /** read only messages signed with these keys (the daemon's --auth-key-file) */
  auth?: MessageAuth;
  /** sharded pub/sub (the daemon's --sharded-pubsub): SSUBSCRIBE, and SPUBLISH from caches */
  sharded?: boolean;
  /** wall clock in ms (Date.now); tests pass their own */
  wallClock?: () => number;
}

export class Subscriber {
  readonly hotSet: HotSet;
  readonly namespace: Namespace;
  readonly stats: SubscriberStats = {
    messages: 0, applied: 0, stale: 0, gaps: 0, resyncs: 0, connects: 0, badMessages: 0, badEntries: 0,
    suspect: 0, unsigned: 0, refused: 0, invalidations: 0, halfOpen: 0, lost: 0, lastNotificationMs: 0,
  };
  private heard = Date.now();
  private pinging = false;
  private handshakeSince = 0;
  private sub?: RedisLike;
  private home?: HomeSubscription;
  private timers: NodeJS.Timeout[] = [];
  private readonly o: Required<Pick<SubscriberOptions, "startTimeoutMs" | "staleAfterMs" | "resyncEveryMs" | "maxMessageBytes" | "maxClockSkewMs" | "healthIntervalMs" | "wallClock">> &
    SubscriberOptions;

  constructor(
    readonly client: RedisLike,
    opts: SubscriberOptions = {},
  ) {
    this.o = { startTimeoutMs: limit("start_timeout_ms"), staleAfterMs: limit("instance_max_age_s") * 1000, resyncEveryMs: 60_000, maxMessageBytes: limit("message_bytes_max"), maxClockSkewMs: limit("clock_skew_s_max") * 1000, healthIntervalMs: 5000, wallClock: Date.now, ...opts };
    this.namespace = opts.namespace ?? new Namespace();
    this.hotSet = new HotSet(opts.hotSet);
  }

  /** Subscribe, bootstrap from the snapshots, keep following until close(). */
  async start(): Promise<void> {
    const channels = [this.namespace.eventsChannel];
    if (this.o.onInvalidate || this.o.onInvalidationPayload) channels.push(this.namespace.invalidateChannel);
    if (this.o.onHeartbeat) channels.push(this.namespace.watchChannel);
    const listen = (conn: RedisLike): void => {
      conn.on(this.o.sharded ? "smessageBuffer" : "messageBuffer", (channel: Buffer, message: Buffer) => {
        this.heard = Date.now();
        void this.handleMessage(channel.toString(), message);
      });
    };
    let lastError: unknown;
    let sub: RedisLike | undefined;
    const home =
      this.client instanceof Cluster && !this.o.sharded
        ? // Plain pub/sub on a Cluster: a connection to the invalidation channel's slot
          // owner, where the daemon and the other SDKs publish (see home.ts).
          new HomeSubscription(this.client, {
            homeChannel: this.namespace.invalidateChannel,
            channels,
            prepare: listen,
            onMove: (conn) => this.moved(conn),
          })
        : undefined;
    this.home = home;
    if (!home) {
      // A connection of our own. ioredis' Cluster routes SSUBSCRIBE to each channel's shard
      // only with shardedSubscribers on (one subscriber connection per primary).
      sub = (
        this.o.sharded && this.client instanceof Cluster
          ? this.client.duplicate(undefined, { shardedSubscribers: true })
          : this.client.duplicate()
      ) as RedisLike;
      this.sub = sub;
      sub.on("error", () => {}); // reconnects are ioredis' job; errors surface in start()
      listen(sub);
      sub.on("error", (e: unknown) => {
        lastError = e;
      });
    }
    let timer: NodeJS.Timeout | undefined;
    const timeoutMs = this.o.startTimeoutMs;
    try {
      const ready = (async () => {
        // Sharded channels live on the node that serves their slot: one SSUBSCRIBE each.
        if (home) sub = this.sub = await home.open();
        else if (this.o.sharded) for (const ch of channels) await sub!.ssubscribe(ch);
        else await sub!.subscribe(...channels);
        await this.bootstrap();
      })();
      ready.catch(() => {}); // after a timeout, its late rejection is ours to drop
      await Promise.race([
        ready,
        new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            const err = home?.lastError ?? lastError;
            const why = err instanceof Error ? err.message : "no reply from Redis";
            reject(new HotkeydUnreachableError(`hot-key subscriber not ready after ${timeoutMs} ms: ${why}`, { cause: err }));
          }, timeoutMs);
        }),
      ]);
    } catch (e) {
      await this.close();
      throw e;
    } finally {
      clearTimeout(timer);
    }
    this.stats.connects++;
    this.follow(sub!);
    home?.follow();
    this.timers.push(setInterval(() => this.hotSet.expire(), 100).unref());
    if (!(sub instanceof Cluster)) {
      // A Cluster routes PING to a pooled node connection, not the subscriber's: no check
      // there. The home connection on a Cluster is a plain one, checked like any other.
      const every = Math.max(20, Math.min(1000, this.o.healthIntervalMs / 4));
      this.timers.push(
        setInterval(() => {
          const s = this.sub;
          if (s && !(s instanceof Cluster)) void this.checkHealth(s);
        }, every).unref(),
      );
    }
    this.timers.push(setInterval(() => void this.bootstrap().catch(() => {}), this.o.resyncEveryMs).unref());
  }

  /** After the subscription is up: count its losses, re-read the snapshots on reconnects. */
  private follow(sub: RedisLike): void {
    sub.on("close", () => {
      // The subscription is gone and may miss invalidations: drop every local copy now,
      // not only once reconnected (spec/failure.md, subscription_lost).
      if (this.sub !== sub) return;
      this.o.onReset?.();
      this.stats.lost++;
    });
    sub.on("ready", () => {
      // Registered once connected, so this runs on reconnects only.
      if (this.sub !== sub) return;
      this.heard = Date.now();
      this.stats.connects++; // a reconnect: resubscribed by ioredis, now re-read the snapshots
      this.o.onReset?.();
      this.bootstrap().catch(() => {});
    });
  }

  /**
   * The home subscription moved to another node (a failover, a slot move, or its node
   * unreachable): a new subscription, which may have missed invalidations meanwhile.
   */
  private moved(conn: Redis): void {
    this.sub = conn;
    this.follow(conn);
    this.heard = Date.now();
    this.handshakeSince = 0;
    this.stats.connects++;
    this.o.onReset?.();
    this.bootstrap().catch(() => {});
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    this.home?.close(); // every connection it made, at once (also a pending one)
    this.home = undefined;
    if (this.sub) {
      this.sub.disconnect();
      this.sub = undefined;
    }
  }

  /**
   * PING a silent subscription; no PONG within healthIntervalMs means the path stopped
   * forwarding without closing (half-open): drop the connection, and ioredis reconnects,
   * resubscribes and (on "ready") re-reads the snapshots. A reconnect whose handshake
   * hangs on such a path is dropped the same way.
   */
  private async checkHealth(sub: RedisLike): Promise<void> {
    const now = Date.now();
    const interval = this.o.healthIntervalMs;
    if (this.pinging || this.sub !== sub) return;
    if (sub.status === "connect") {
      if (this.handshakeSince === 0) this.handshakeSince = now;
      else if (now - this.handshakeSince > 2 * interval) this.replace(sub);
      return;
    }
    this.handshakeSince = 0;
    if (sub.status !== "ready" || now - this.heard < interval) return;
    this.pinging = true;
    let timer: NodeJS.Timeout | undefined;
    const alive = await Promise.race([
      sub.ping().then(() => true, () => false),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), interval);
      }),
    ]);
    clearTimeout(timer);
    this.pinging = false;
    if (alive) this.heard = Date.now();
    else if (this.sub === sub) this.replace(sub);
  }

  private replace(sub: RedisLike): void {
    this.stats.halfOpen++;
    this.heard = Date.now();
    this.handshakeSince = 0;
    sub.disconnect(true);
    if (!(sub instanceof Cluster)) destroySocket(sub); // not after ioredis' 2 s: the path is dead
  }

  /**
   * What the subscription does with each message it receives (the conformance vectors
   * drive it too): an invalidation goes to onInvalidate; a notification is parsed, applied,
   * and on a sequence gap the instance's snapshot is read and applied first. Problems with
   * the content are counted, never thrown.
   */
  async handleMessage(channel: string, payload: Buffer): Promise<void> {
    if (channel === this.namespace.watchChannel) {
      this.o.onHeartbeat?.(payload);
      return;
    }
    if (channel === this.namespace.invalidateChannel && this.o.onInvalidationPayload) {
      this.stats.invalidations++;
      this.o.onInvalidationPayload(payload);
      return;
    }
    if (channel === this.namespace.invalidateChannel) {
      try {
        const { origin, keys } = decodeInvalidation(payload);
        this.stats.invalidations++;
        this.o.onInvalidate?.(origin, keys);
      } catch {
        this.stats.badMessages++;
      }
      return;
    }
    const msg = this.parse(payload);
    if (msg === undefined) return;
    this.stats.lastNotificationMs = Date.now();
    const r = this.hotSet.apply(msg);
    if (r !== "gap") return this.count(r);
    this.stats.gaps++;
    let snaps: Message[] = [];
    try {
      snaps = await this.readSnapshots([msg.instance]);
    } catch {
      /* the TTLs heal what the snapshot could not */
    }
    this.count(this.afterResync(msg, snaps));
  }

  /** Validate one channel message (size, signature, format, clock); undefined if dropped. */
  parse(payload: Buffer): Message | undefined {
    this.stats.messages++;
    if (payload.length > this.o.maxMessageBytes) {
      this.stats.badMessages++;
      return undefined;
    }
    if (this.o.auth) {
      const body = this.o.auth.verify(payload);
      if (body === undefined) {
        this.stats.unsigned++;
        return undefined;
      }
      payload = body;
    }
    let msg;
    try {
      msg = decodeMessage(payload);
    } catch (e) {
      if (!(e instanceof WireError)) throw e;
      this.stats.badMessages++;
      return undefined;
    }
    this.stats.badEntries += msg.skipped;
    if (msg.ts * 1000 > this.o.wallClock() + this.o.maxClockSkewMs) {
      this.stats.suspect++; // a forged future ts would outlive the real daemon
      return undefined;
    }
    return msg;
  }

  /**
   * Apply the snapshots read after msg revealed a gap, then msg unless its seq is far
   * ahead of its instance's snapshot (suspect: the daemon writes the snapshot in the same
   * transaction as each message, so a real one never is).
   */
  afterResync(msg: Message, snaps: Message[]): ApplyResult | "suspect" {
    for (const snap of snaps) {
      this.hotSet.apply(snap, true);
      if (snap.instance === msg.instance && msg.seq > snap.seq + this.hotSet.maxSeqJump) {
        this.stats.suspect++;
        return "suspect";
      }
    }
    const r = this.hotSet.apply(msg);
    return r === "gap" ? this.hotSet.apply(msg, true) : r;
  }

  private count(r: ApplyResult | "suspect"): void {
    if (r === "applied") this.stats.applied++;
    else if (r === "stale") this.stats.stale++;
    else if (r === "refused") this.stats.refused++;
  }

  /** Read and apply the snapshots of live instances (or the given ones). */
  async bootstrap(instances?: string[]): Promise<void> {
    for (const m of await this.readSnapshots(instances)) this.hotSet.apply(m, true);
  }

  /** One GET per snapshot (cluster-safe); a bad or unsigned snapshot is skipped and counted. */
  async readSnapshots(instances?: string[]): Promise<Message[]> {
    const rc = this.o.snapshotClient ?? this.client;
    if (instances === undefined) {
      const min = (this.o.wallClock() - this.o.staleAfterMs) / 1000;
      instances = await rc.zrangebyscore(this.namespace.instances, min.toFixed(3), "+inf");
    }
    this.stats.resyncs++;
    const out: Message[] = [];
    for (const inst of instances) {
      let raw = await rc.getBuffer(this.namespace.snapshot(inst));
      if (raw === null) continue;
      if (this.o.auth) {
        raw = this.o.auth.verify(raw) ?? null;
        if (raw === null) {
          this.stats.unsigned++;
          continue;
        }
      }
      try {
        const msg = decodeMessage(raw);
        this.stats.badEntries += msg.skipped;
        msg.full = true;
        out.push(msg);
      } catch {
        this.stats.badMessages++;
      }
    }
    return out;
  }
}
