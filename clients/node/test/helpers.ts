import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Redis } from "ioredis";

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on("error", reject);
  });
}

export interface RedisServer {
  port: number;
  proc: ChildProcess;
  client(): Redis;
  stop(): Promise<void>;
}

/** A throwaway redis-server on a free port: the tests talk to real servers. */
export async function startRedis(...extra: string[]): Promise<RedisServer> {
  return startRedisOn(await freePort(), ...extra);
}

/** redis-server on a given port (a restart reuses its predecessor's port). */
export async function startRedisOn(port: number, ...extra: string[]): Promise<RedisServer> {
  const dir = mkdtempSync(join(tmpdir(), "hotkeyd-node-"));
  const bin = process.env.REDIS_SERVER ?? "redis-server";
  const proc = spawn(bin, ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, ...extra], {
    stdio: "ignore",
  });
  const clients: Redis[] = [];
  const probe = new Redis({ port, host: "127.0.0.1", lazyConnect: true, enableReadyCheck: false, retryStrategy: () => null, maxRetriesPerRequest: 0 });
  probe.on("error", () => {});
  const deadline = Date.now() + 10_000;
  for (;;) {
    try {
      await probe.connect();
      await probe.ping();
      break;
    } catch (e) {
      if (/NOAUTH/.test(String(e))) break; // up, with requirepass
      if (Date.now() > deadline) throw new Error(`redis-server on ${port} did not start (${bin})`);
      await new Promise((r) => setTimeout(r, 30));
    }
  }
  probe.disconnect();
  return {
    port,
    proc,
    client() {
      const c = new Redis({ port, host: "127.0.0.1" });
      clients.push(c);
      return c;
    },
    async stop() {
      for (const c of clients) c.disconnect();
      proc.kill("SIGKILL");
    },
  };
}

export async function commandCalls(c: Redis, command: string): Promise<number> {
  const info = await c.info("commandstats");
  const m = new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(info);
  return m ? Number(m[1]) : 0;
}

export async function waitFor(what: string, timeoutMs: number, cond: () => boolean | Promise<boolean>): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * A TCP proxy that can freeze: frozen, it keeps every connection open but forwards
 * nothing (a half-open path: no FIN, no RST), and what arrives meanwhile is lost.
 */
export class FreezableProxy {
  frozen = false;
  port = 0;
  private readonly sockets: Socket[] = [];
  private readonly server: Server;

  constructor(targetPort: number) {
    this.server = createServer((down) => {
      const up = connect(targetPort, "127.0.0.1");
      this.sockets.push(down, up);
      for (const [from, to] of [[down, up], [up, down]] as const) {
        from.on("data", (chunk: Buffer) => {
          if (!this.frozen) to.write(chunk);
        });
        from.on("error", () => to.destroy());
        from.on("close", () => to.destroy());
      }
    });
  }

  async listen(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.port = (this.server.address() as { port: number }).port;
    return this;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise((resolve) => this.server.close(resolve));
  }
}
