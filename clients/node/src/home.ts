/**
 * Plain pub/sub on a Redis Cluster, subscribed on the channel's home node: the primary
 * that owns the hash slot of the invalidation channel, where the daemon's watch and the
 * other SDKs publish (Python's pubsub_node, Go's MasterForKey). ioredis' Cluster would
 * subscribe on a random node, and a PUBLISH reaches other nodes over the cluster bus,
 * whose outgoing links Redis 7.0 leaves with Nagle's algorithm on: up to ~40 ms later.
 *
 * The subscription is a standalone connection built with the Cluster's redisOptions
 * (password, username, TLS). The owner of the slot is re-read every recheckMs (5 s), at
 * once when the connection closes, and whenever the Cluster refreshed its slot map (it
 * does on MOVED); when the owner changed, a new connection subscribes there and replaces
 * the old one. A home node that stays unreachable (killed, frozen) is left for any node
 * that answers (a PUBLISH reaches every node, later); the owner is tried again at each
 * re-check. Nothing here waits without a bound, and close() ends every connection at once.
 */
import calculateSlot from "cluster-key-slot";
import IORedis, { type Cluster, type Redis } from "ioredis";

// The default export is the Redis class in ioredis 4 and 5 (only 5 names it `Redis`).
const RedisClass = IORedis as unknown as new (options: object) => Redis;

export interface HomeOptions {
  /** the channel whose slot owner is home (the namespace's invalidation channel) */
  homeChannel: string;
  /** every channel to subscribe */
  channels: string[];
  /** each new connection, before it subscribes: attach the message handlers here */
  prepare: (conn: Redis) => void;
  /** a new connection is subscribed and replaces the previous one (closed right after) */
  onMove: (conn: Redis, node: string) => void;
  /** re-read the slot's owner this often (5000 ms) */
  recheckMs?: number;
  /** one connection attempt, connect and SUBSCRIBE, gives up after this long (1500 ms) */
  attemptMs?: number;
  /** a subscription down this long moves to any node that answers (2000 ms) */
  fallbackAfterMs?: number;
}

/** host:port of a node, as in Cluster.slots */
function nodeKey(n: Redis): string {
  return `${n.options.host}:${n.options.port}`;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms).unref());
}

/**
 * Close the socket now: disconnect() alone half-closes it, and a frozen or unreachable
 * peer keeps it open (ioredis 5 destroys it 2 s later, ioredis 4 not at all).
 */
export function destroySocket(c: { disconnect(reconnect?: boolean): void }): void {
  (c as unknown as { stream?: { destroy?: () => void } }).stream?.destroy?.();
}

/** Close a connection for good, at once. */
export function kill(c: Redis | undefined): void {
  if (!c) return;
  c.disconnect();
  destroySocket(c);
}

/** The primary that serves key's slot in the Cluster's slot map ("host:port"), if loaded. */
export function slotOwner(cluster: Cluster, key: string): string | undefined {
  return cluster.slots[calculateSlot(key)]?.[0];
}

/**
 * The primary that owns channel's slot, as the Cluster's slot map has it (undefined before
 * the map is loaded, or when no connection to that node is in the pool). A PUBLISH sent
 * there reaches the home subscriptions of every SDK without the cluster bus's delay.
 */
export function homePrimary(cluster: Cluster, channel: string): Redis | undefined {
  const owner = slotOwner(cluster, channel);
  if (owner === undefined) return undefined;
  return cluster.nodes("master").find((n) => nodeKey(n) === owner);
}

export class HomeSubscription {
  /** the subscribed connection and its node ("host:port") */
  conn?: Redis;
  node?: string;
  /** the last error seen (for start()'s HotkeydUnreachableError) */
  lastError?: unknown;
  readonly slot: number;
  private closed = false;
  private checking = false;
  private downSince = 0;
  private ticks = 0;
  private timer?: NodeJS.Timeout;
  private readonly pending = new Set<Redis>();
  private readonly recheckMs: number;
  private readonly attemptMs: number;
  private readonly fallbackAfterMs: number;
  private readonly onRefresh = (): void => void this.check(false);
  private readonly onNodeError = (e: unknown): void => {
    this.lastError = e;
  };

  constructor(
    readonly cluster: Cluster,
    private readonly o: HomeOptions,
  ) {
    this.slot = calculateSlot(o.homeChannel);
    this.recheckMs = o.recheckMs ?? 5000;
    this.attemptMs = o.attemptMs ?? 1500;
    this.fallbackAfterMs = o.fallbackAfterMs ?? 2000;
  }

  /** The primary that owns the slot, as the Cluster's slot map says now ("host:port"). */
  owner(): string | undefined {
    return slotOwner(this.cluster, this.o.homeChannel);
  }

  /**
   * The first subscription: on the home node when it answers, else on any node; retries
   * until one subscribes or close() (the caller bounds it with startTimeoutMs).
   */
  async open(): Promise<Redis> {
    this.cluster.on("node error", this.onNodeError);
    const since = Date.now();
    let triedHome = false;
    for (let round = 0; !this.closed; round++) {
      if (this.cluster.status === "wait") this.cluster.connect().catch(() => {});
      if (this.owner() === undefined) await this.refresh();
      const owner = this.owner();
      if (owner === undefined && Date.now() - since < this.attemptMs) {
        await sleep(20); // the slot map comes with the Cluster's connection: wait a little
        continue;
      }
      const nodes = !triedHome && owner !== undefined ? [owner] : this.candidates(owner);
      triedHome ||= owner !== undefined;
      for (const node of nodes) {
        const c = await this.attempt(node);
        if (c) {
          this.install(c, node);
          return c;
        }
      }
      await sleep(Math.min(500, 50 * (round + 1)));
    }
    throw new Error("subscriber closed");
  }

  /** After open(): keep the subscription on the slot's current owner. */
  follow(): void {
    if (this.closed) return;
    this.cluster.on("refresh", this.onRefresh);
    const every = 250;
    const refreshEvery = Math.max(1, Math.round(this.recheckMs / every));
    this.timer = setInterval(() => {
      this.ticks++;
      if (this.ticks % refreshEvery === 0) void this.check(true);
      else if (this.isDown()) void this.check(false);
    }, every).unref();
  }

  close(): void {
    this.closed = true;
    clearInterval(this.timer);
    this.cluster.off("refresh", this.onRefresh);
    this.cluster.off("node error", this.onNodeError);
    for (const c of this.pending) kill(c);
    this.pending.clear();
    kill(this.conn);
    this.conn = undefined;
  }

  private isDown(): boolean {
    return this.downSince !== 0 && Date.now() - this.downSince >= this.fallbackAfterMs;
  }

  /**
   * Is the subscription where it should be? Move it when the slot's owner changed, or
   * when it has been down for fallbackAfterMs (the owner first, then any node).
   */
  private async check(refresh: boolean): Promise<void> {
    if (this.closed || this.checking) return;
    this.checking = true;
    try {
      if (refresh) await this.refresh();
      if (this.closed) return;
      const owner = this.owner();
      const down = this.isDown();
      if (owner !== undefined && owner !== this.node) {
        if (await this.moveTo([owner])) return;
        if (down) await this.moveTo(this.candidates(owner).filter((n) => n !== owner && n !== this.node));
      } else if (down) {
        // the connection keeps retrying its node; meanwhile any other node that answers
        // (the re-check every recheckMs brings it back to the owner)
        await this.moveTo(this.candidates(owner).filter((n) => n !== this.node));
      }
    } catch (e) {
      this.lastError = e;
    } finally {
      this.checking = false;
    }
  }

  /** The owner first, then the other primaries, then the replicas. */
  private candidates(owner: string | undefined): string[] {
    const all = [owner, ...this.cluster.nodes("master").map(nodeKey), ...this.cluster.nodes("slave").map(nodeKey)];
    return [...new Set(all.filter((n): n is string => n !== undefined))];
  }

  private async moveTo(nodes: string[]): Promise<boolean> {
    for (const node of nodes) {
      if (this.closed) return false;
      const c = await this.attempt(node);
      if (!c) continue;
      const old = this.conn;
      this.install(c, node);
      this.o.onMove(c, node);
      kill(old);
      return true;
    }
    return false;
  }

  private install(c: Redis, node: string): void {
    this.conn = c;
    this.node = node;
    this.downSince = 0;
    c.on("close", () => {
      if (this.conn !== c || this.closed) return;
      if (this.downSince === 0) this.downSince = Date.now();
      void this.check(true); // a failover or a slot move closes it too
    });
    c.on("ready", () => {
      if (this.conn === c) this.downSince = 0;
    });
  }

  /** Ask the Cluster to re-read its slot map (as it does on MOVED), for at most 2 s. */
  private refresh(): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(resolve, 2000).unref();
      try {
        this.cluster.refreshSlotsCache((err) => {
          if (err) this.lastError = err;
          clearTimeout(t);
          resolve();
        });
      } catch (e) {
        this.lastError = e;
        clearTimeout(t);
        resolve();
      }
    });
  }

  /** A new connection to node, subscribed within attemptMs; undefined if not. */
  private async attempt(node: string): Promise<Redis | undefined> {
    if (this.closed) return undefined;
    const at = node.lastIndexOf(":");
    const c = new RedisClass({
      ...this.cluster.options.redisOptions,
      host: node.slice(0, at),
      port: Number(node.slice(at + 1)),
      lazyConnect: false,
      enableOfflineQueue: true,
      readOnly: false,
      connectTimeout: this.attemptMs,
      // reconnects are ioredis' (it resubscribes); check() decides when to move
      retryStrategy: (times: number) => Math.min(times * 100, 1000),
    });
    this.pending.add(c);
    c.on("error", (e: unknown) => {
      this.lastError = e;
    });
    this.o.prepare(c);
    let timer: NodeJS.Timeout | undefined;
    const ok = await Promise.race([
      c.subscribe(...this.o.channels).then(
        () => true,
        (e: unknown) => {
          this.lastError = e;
          return false;
        },
      ),
      new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(false), this.attemptMs).unref();
      }),
    ]);
    clearTimeout(timer);
    this.pending.delete(c);
    if (!ok || this.closed) {
      kill(c);
      return undefined;
    }
    return c;
  }
}
