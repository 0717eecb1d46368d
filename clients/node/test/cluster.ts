// A throwaway Redis Cluster of real redis-server processes on free ports, built as
// hotkeyd.testing.redis.RedisClusterServers builds one: CLUSTER MEET, ADDSLOTSRANGE,
// REPLICATE, then wait for cluster_state:ok and every replica in sync.
import { Cluster, Redis } from "ioredis";
import { freePort, startRedisOn, type RedisServer } from "./helpers.js";

export interface ClusterNode extends RedisServer {
  bus: number;
  alive: boolean;
}

async function command(port: number, password: string | undefined, ...args: (string | number)[]): Promise<unknown> {
  const r = new Redis({ port, host: "127.0.0.1", password, lazyConnect: true, retryStrategy: () => null, maxRetriesPerRequest: 0, connectTimeout: 2000, commandTimeout: 5000 });
  r.on("error", () => {});
  try {
    await r.connect();
    return await r.call(String(args[0]), ...args.slice(1).map(String));
  } finally {
    r.disconnect();
  }
}

async function until(what: string, timeoutMs: number, ok: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      if (await ok()) return;
    } catch {
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export class TestCluster {
  readonly nodes: ClusterNode[] = [];
  private readonly clients: Cluster[] = [];

  private constructor(readonly primaries: number, readonly replicas: number, readonly password?: string) {}

  /** A command on one node (a connection of its own). */
  cmd(port: number, ...args: (string | number)[]): Promise<unknown> {
    return command(port, this.password, ...args);
  }

  /** primaries primaries with replicas replicas each; password: requirepass and masterauth. */
  static async start(primaries = 3, replicas = 0, nodeTimeoutMs = 2000, password?: string): Promise<TestCluster> {
    const c = new TestCluster(primaries, replicas, password);
    const auth = password ? ["--requirepass", password, "--masterauth", password] : [];
    try {
      for (let i = 0; i < primaries * (1 + replicas); i++) {
        const bus = await freePort();
        const srv = await startRedisOn(await freePort(), "--cluster-enabled", "yes", "--cluster-port", String(bus),
          "--cluster-node-timeout", String(nodeTimeoutMs), "--cluster-config-file", "nodes.conf", "--enable-debug-command", "yes", ...auth);
        c.nodes.push(Object.assign(srv, { bus, alive: true }));
      }
      const first = c.nodes[0]!;
      for (const n of c.nodes.slice(1)) await c.cmd(n.port, "CLUSTER", "MEET", "127.0.0.1", first.port, first.bus);
      const step = Math.floor(16384 / primaries);
      for (let i = 0; i < primaries; i++) {
        const lo = i * step;
        const hi = i === primaries - 1 ? 16383 : (i + 1) * step - 1;
        await c.cmd(c.nodes[i]!.port, "CLUSTER", "ADDSLOTSRANGE", lo, hi);
      }
      await until("every node to know every other", 30_000, async () => {
        for (const n of c.nodes) {
          const lines = String(await c.cmd(n.port, "CLUSTER", "NODES")).trim().split("\n");
          if (lines.length !== c.nodes.length) return false;
        }
        return true;
      });
      const ids = await Promise.all(c.nodes.map((n) => c.cmd(n.port, "CLUSTER", "MYID")));
      for (let r = 0; r < c.nodes.length - primaries; r++) {
        await c.cmd(c.nodes[primaries + r]!.port, "CLUSTER", "REPLICATE", String(ids[r % primaries]));
      }
      await c.settled();
    } catch (e) {
      await c.stop();
      throw e;
    }
    return c;
  }

  /** cluster_state:ok on every live node, and every replica in sync. */
  async settled(timeoutMs = 30_000): Promise<void> {
    await until("the cluster to settle", timeoutMs, async () => {
      for (const n of this.nodes.filter((x) => x.alive)) {
        if (!String(await this.cmd(n.port, "CLUSTER", "INFO")).includes("cluster_state:ok")) return false;
        const repl = String(await this.cmd(n.port, "INFO", "replication"));
        if (repl.includes("role:slave") && !repl.includes("master_link_status:up")) return false;
        if (repl.includes("role:master") && this.replicas > 0) {
          const m = /connected_slaves:(\d+)/.exec(repl);
          if (!m || Number(m[1]) < this.replicas) return false;
        }
      }
      return true;
    });
  }

  /** An ioredis Cluster client (closed by stop()). */
  client(opts: ConstructorParameters<typeof Cluster>[1] = {}): Cluster {
    const seed = this.nodes.filter((n) => n.alive).map((n) => ({ host: "127.0.0.1", port: n.port }));
    const c = new Cluster(seed, { ...opts, redisOptions: { password: this.password, ...opts.redisOptions } });
    c.on("error", () => {});
    this.clients.push(c);
    return c;
  }

  async slotOf(key: string): Promise<number> {
    return Number(await this.cmd(this.live().port, "CLUSTER", "KEYSLOT", key));
  }

  /** The primary that serves slot now, as a live node sees it. */
  async owner(slot: number, via = this.live()): Promise<ClusterNode> {
    const slots = (await this.cmd(via.port, "CLUSTER", "SLOTS")) as [number, number, [string, number]][];
    for (const [lo, hi, primary] of slots) {
      if (lo <= slot && slot <= hi) {
        const n = this.nodes.find((x) => x.port === Number(primary[1]));
        if (n) return n;
      }
    }
    throw new Error(`no node serves slot ${slot}`);
  }

  async nodeFor(key: string): Promise<ClusterNode> {
    return this.owner(await this.slotOf(key));
  }

  async id(n: ClusterNode): Promise<string> {
    return String(await this.cmd(n.port, "CLUSTER", "MYID"));
  }

  async isPrimary(n: ClusterNode): Promise<boolean> {
    return String(await this.cmd(n.port, "INFO", "replication")).includes("role:master");
  }

  /** CLUSTER FAILOVER on a replica of primary; returns the new primary once settled. */
  async failover(primary: ClusterNode): Promise<ClusterNode> {
    const pid = await this.id(primary);
    let replica: ClusterNode | undefined;
    for (const n of this.nodes.filter((x) => x.alive && x !== primary)) {
      const nodes = String(await this.cmd(n.port, "CLUSTER", "NODES")).split("\n");
      const me = nodes.find((l) => l.includes("myself"));
      if (me && me.split(" ")[3] === pid) replica = n;
    }
    if (!replica) throw new Error(`no replica of ${primary.port}`);
    await this.cmd(replica.port, "CLUSTER", "FAILOVER");
    const r = replica;
    await until(`the failover of ${primary.port}`, 30_000, async () => (await this.isPrimary(r)) && !(await this.isPrimary(primary)));
    await this.settled();
    return r;
  }

  /** Move slot (and its keys) to primary dst, as a reshard does. */
  async migrateSlot(slot: number, dst: ClusterNode): Promise<void> {
    const src = await this.owner(slot);
    if (src === dst) return;
    const [srcId, dstId] = [await this.id(src), await this.id(dst)];
    await this.cmd(dst.port, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcId);
    await this.cmd(src.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstId);
    for (;;) {
      const keys = (await this.cmd(src.port, "CLUSTER", "GETKEYSINSLOT", slot, 100)) as string[];
      if (keys.length === 0) break;
      await this.cmd(src.port, "MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, ...(this.password ? ["AUTH", this.password] : []), "KEYS", ...keys);
    }
    for (const n of this.nodes.filter((x) => x.alive)) {
      if (await this.isPrimary(n)) await this.cmd(n.port, "CLUSTER", "SETSLOT", slot, "NODE", dstId);
    }
    await until(`slot ${slot} to move to ${dst.port}`, 30_000, async () => {
      for (const n of this.nodes.filter((x) => x.alive)) if ((await this.owner(slot, n)) !== dst) return false;
      return true;
    });
  }

  /** Clients on node n subscribed to channel (CLIENT LIST: sub > 0 and PUBSUB CHANNELS). */
  async subscribers(n: ClusterNode, channel: string): Promise<number> {
    const r = (await this.cmd(n.port, "PUBSUB", "NUMSUB", channel)) as [string, number];
    return Number(r[1]);
  }

  kill(n: ClusterNode): void {
    n.alive = false;
    n.proc.kill("SIGKILL");
  }

  live(): ClusterNode {
    const n = this.nodes.find((x) => x.alive);
    if (!n) throw new Error("no live node");
    return n;
  }

  async stop(): Promise<void> {
    for (const c of this.clients) c.disconnect();
    for (const n of this.nodes) await n.stop();
  }
}
