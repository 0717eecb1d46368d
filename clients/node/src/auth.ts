/**
 * Message authentication v1 (docs/wire-format.md, "Signed messages"): the daemon appends
 * ,"sig":"<hex HMAC-SHA256(key, body)>" to each message and snapshot; a client with the
 * key reads only what verifies. The MAC covers the exact bytes (no canonicalization).
 */
import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { limit } from "./limits.js";

export const AUTH_ENV_VAR = "HOTKEYD_AUTH_KEY";
/** The reporter key that signs demand reports (never the daemon's signing key). */
export const DEMAND_KEY_ENV_VAR = "HOTKEYD_DEMAND_KEY";
/** A file holding reporter keys, one a line (the first signs); wins over DEMAND_KEY_ENV_VAR. */
export const DEMAND_KEY_FILE_ENV_VAR = "HOTKEYD_DEMAND_KEY_FILE";
export const MIN_KEY_BYTES = limit("auth_key_bytes_min");
const HEAD = Buffer.from(',"sig":"');
const SUFFIX_LEN = HEAD.length + 64 + 2;
/** Bytes a signature adds to a message. */
export const SIGNATURE_BYTES = SUFFIX_LEN - 1;

export class MessageAuth {
  private readonly keys: Buffer[];

  /** The first key signs; every key verifies (put the new key first while rotating). */
  constructor(keys: (string | Buffer)[]) {
    if (keys.length === 0) throw new RangeError("message authentication: no key given");
    this.keys = keys.map((k) => (typeof k === "string" ? Buffer.from(k, "utf8") : k));
    if (this.keys.some((k) => k.length < MIN_KEY_BYTES)) throw new RangeError(`a key must have at least ${MIN_KEY_BYTES} bytes`);
  }

  /** The key in HOTKEYD_AUTH_KEY, or undefined when unset. */
  static fromEnv(env: NodeJS.ProcessEnv = process.env): MessageAuth | undefined {
    const v = env[AUTH_ENV_VAR];
    return v ? new MessageAuth([v]) : undefined;
  }

  /** Keys from a file, one a line (blank lines ignored), as the daemon reads its key files. */
  static fromFile(path: string): MessageAuth {
    const lines = readFileSync(path).toString("latin1").split("\n");
    const keys = lines.filter((l) => l.trim() !== "").map((l) => Buffer.from(l.replace(/\r$/, ""), "latin1"));
    return new MessageAuth(keys);
  }

  /**
   * The reporter key that signs demand reports: the file named by HOTKEYD_DEMAND_KEY_FILE,
   * else HOTKEYD_DEMAND_KEY; undefined when neither is set (reports go unsigned).
   */
  static reporterKeyFromEnv(env: NodeJS.ProcessEnv = process.env): MessageAuth | undefined {
    const path = env[DEMAND_KEY_FILE_ENV_VAR];
    if (path) return MessageAuth.fromFile(path);
    const v = env[DEMAND_KEY_ENV_VAR];
    return v ? new MessageAuth([v]) : undefined;
  }

  private mac(key: Buffer, body: Buffer): Buffer {
    return Buffer.from(createHmac("sha256", key).update(body).digest("hex"), "ascii");
  }

  sign(body: Buffer): Buffer {
    if (body.length === 0 || body[body.length - 1] !== 0x7d) throw new RangeError("only a JSON object can be signed");
    return Buffer.concat([body.subarray(0, -1), HEAD, this.mac(this.keys[0], body), Buffer.from('"}')]);
  }

  /** The unsigned body when signed carries a valid MAC under any key, else undefined. */
  verify(signed: Buffer): Buffer | undefined {
    const n = signed.length;
    if (n < SUFFIX_LEN + 2 || signed[n - 1] !== 0x7d || signed[n - 2] !== 0x22) return undefined;
    const start = n - SUFFIX_LEN;
    if (!signed.subarray(start, start + HEAD.length).equals(HEAD)) return undefined;
    const got = signed.subarray(start + HEAD.length, n - 2);
    const body = Buffer.concat([signed.subarray(0, start), Buffer.from("}")]);
    for (const k of this.keys) if (timingSafeEqual(got, this.mac(k, body))) return body;
    return undefined;
  }
}
