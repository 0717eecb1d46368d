// A throwaway PostgreSQL cluster on a free loopback port, as hotkeyd.testing's
// PostgresServer: trust auth on 127.0.0.1, fsync off; run as the postgres user when the
// tests run as root (PostgreSQL refuses root).
import { execFileSync, spawn } from "node:child_process";
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import { join } from "node:path";
import pg from "pg";
import { freePort } from "./helpers.js";

export interface PostgresServer {
  pool: pg.Pool;
  stop(): Promise<void>;
}

export async function startPostgres(): Promise<PostgresServer> {
  const versions = existsSync("/usr/lib/postgresql") ? readdirSync("/usr/lib/postgresql").sort((a, b) => Number(a) - Number(b)) : [];
  const bindir = versions.map((v) => `/usr/lib/postgresql/${v}/bin`).filter((d) => existsSync(join(d, "initdb"))).at(-1);
  if (!bindir) throw new Error("PostgreSQL is not installed (apt-get install -y postgresql)");
  const dir = mkdtempSync(join(tmpdir(), "hotkeyd-pg-"));
  let user = userInfo().username;
  let ids: { uid?: number; gid?: number } = {};
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync("id", ["-u", "postgres"]).toString().trim());
    const gid = Number(execFileSync("id", ["-g", "postgres"]).toString().trim());
    chownSync(dir, uid, gid);
    ids = { uid, gid };
    user = "postgres";
  }
  const data = join(dir, "data");
  execFileSync(join(bindir, "initdb"), ["-D", data, "-U", user, "--auth=trust", "--no-sync", "-E", "UTF8"], { ...ids, cwd: dir, stdio: "ignore" });
  const port = await freePort();
  const proc = spawn(join(bindir, "postgres"), ["-D", data, "-p", String(port), "-h", "127.0.0.1", "-k", dir, "-c", "fsync=off", "-c", "full_page_writes=off"], { ...ids, cwd: dir, stdio: "ignore" });
  const pool = new pg.Pool({ host: "127.0.0.1", port, user, database: "postgres", max: 4 });
  // An idle client whose server went away (shutdown, or a start-up probe cut off) emits
  // "error" on the pool; pg's docs: always listen, or it is an uncaught exception.
  pool.on("error", () => {});
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await pool.query("SELECT 1");
      break;
    } catch (err) {
      if (Date.now() > deadline || proc.exitCode !== null) {
        proc.kill("SIGKILL");
        throw err;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return {
    pool,
    async stop() {
      await pool.end();
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGINT"); // fast shutdown
      await exited;
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
