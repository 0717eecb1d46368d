/**
 * Keep a HotSet current from the daemon's events channel.
 *
 * Start-up order closes the race between snapshot and stream: subscribe first (on a
 * connection of our own), wait for the confirmation, then read the snapshots; messages
 * published meanwhile are applied afterwards, and the per-instance sequence numbers make
 * the ones already in a snapshot stale. The same order runs after every reconnect.
 */
import type { Cluster, Redis } from "ioredis";
import { HotSet, type HotSetOptions } from "./hotset.js";
import { decodeInvalidation, decodeMessage, Namespace, WireError } from "./wire.js";

export type RedisLike = Redis | Cluster;

export interface SubscriberStats {
  messages: number;
  applied: number;
  stale: number;
  gaps: number;
  resyncs: number;
  connects: number;
  badMessages: number;
  invalidations: number;
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
  /** instances whose heartbeat is older are ignored (30 s) */
  staleAfterMs?: number;
  /** periodic full resync, a safety net (60 s) */
  resyncEveryMs?: number;
  /** larger messages are dropped and counted (1 MiB) */
  maxMessageBytes?: number;
}

export class Subscriber {
  readonly hotSet: HotSet;
  readonly namespace: Namespace;
  readonly stats: SubscriberStats = {
    messages: 0, applied: 0, stale: 0, gaps: 0, resyncs: 0, connects: 0, badMessages: 0, invalidations: 0,
  };
  private sub?: RedisLike;
  private timers: NodeJS.Timeout[] = [];
  private readonly o: Required<Pick<SubscriberOptions, "staleAfterMs" | "resyncEveryMs" | "maxMessageBytes">> & SubscriberOptions;

  constructor(
    readonly client: RedisLike,
    opts: SubscriberOptions = {},
  ) {
    this.o = { staleAfterMs: 30_000, resyncEveryMs: 60_000, maxMessageBytes: 1 << 20, ...opts };
    this.namespace = opts.namespace ?? new Namespace();
    this.hotSet = new HotSet(opts.hotSet);
  }

  /** Subscribe, bootstrap from the snapshots, keep following until close(). */
  async start(): Promise<void> {
    const sub = this.client.duplicate() as RedisLike;
    this.sub = sub;
    sub.on("error", () => {}); // reconnects are ioredis' job; errors surface in start()
    const channels = [this.namespace.eventsChannel];
    if (this.o.onInvalidate) channels.push(this.namespace.invalidateChannel);
    sub.on("messageBuffer", (channel: Buffer, message: Buffer) => {
      void this.onMessage(channel.toString(), message);
    });
    try {
      await sub.subscribe(...channels);
      await this.bootstrap();
    } catch (e) {
      await this.close();
      throw e;
    }
    this.stats.connects++;
    sub.on("ready", () => {
      // Registered once connected, so this runs on reconnects only.
      this.stats.connects++; // a reconnect: resubscribed by ioredis, now re-read the snapshots
      this.o.onReset?.();
      this.bootstrap().catch(() => {});
    });
    this.timers.push(setInterval(() => this.hotSet.expire(), 100).unref());
    this.timers.push(setInterval(() => void this.bootstrap().catch(() => {}), this.o.resyncEveryMs).unref());
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    this.timers = [];
    if (this.sub) {
      this.sub.disconnect();
      this.sub = undefined;
    }
  }

  private async onMessage(channel: string, payload: Buffer): Promise<void> {
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
    this.stats.messages++;
    if (payload.length > this.o.maxMessageBytes) {
      this.stats.badMessages++;
      return;
    }
    let msg;
    try {
      msg = decodeMessage(payload);
    } catch (e) {
      if (e instanceof WireError) {
        this.stats.badMessages++;
        return;
      }
      throw e;
    }
    const r = this.hotSet.apply(msg);
    if (r === "applied") this.stats.applied++;
    else if (r === "stale") this.stats.stale++;
    else {
      this.stats.gaps++;
      try {
        await this.bootstrap([msg.instance]);
      } catch {
        /* the TTLs heal what the snapshot could not */
      }
      if (this.hotSet.apply(msg) === "gap") this.hotSet.apply(msg, true);
      this.stats.applied++;
    }
  }

  /** Read the snapshots of live instances (or the given ones), one GET each (cluster-safe). */
  async bootstrap(instances?: string[]): Promise<void> {
    const rc = this.o.snapshotClient ?? this.client;
    if (instances === undefined) {
      const min = (Date.now() - this.o.staleAfterMs) / 1000;
      instances = await rc.zrangebyscore(this.namespace.instances, min.toFixed(3), "+inf");
    }
    this.stats.resyncs++;
    for (const inst of instances) {
      const raw = await rc.getBuffer(this.namespace.snapshot(inst));
      if (raw === null) continue;
      try {
        const msg = decodeMessage(raw);
        msg.full = true;
        this.hotSet.apply(msg, true);
      } catch {
        this.stats.badMessages++;
      }
    }
  }
}
