/**
 * Reporter: applications count their own key accesses and send aggregates to Kafka,
 * partitioned exactly like every hotkeyd reporter (murmur3_32(key, 0) mod partitions),
 * so all accesses of a key from every app and language reach one daemon of the group.
 */
// kafkajs is an optional peer dependency: only its types are imported here (erased at
// build time), and start() loads it, so an app that never reports need not install it.
import type { Kafka, KafkaConfig, Producer } from "kafkajs";
import { isUtf8 } from "node:buffer";
import { keyBytes } from "./keys.js";
import { partitionFor } from "./murmur3.js";
import { limit } from "./limits.js";

export const MAX_REPORT_COUNT = limit("count_max");

export interface ReporterOptions {
  brokers: string[];
  topic: string;
  flushIntervalMs?: number; // 100
  maxKeys?: number; // 100000 distinct keys between flushes; more are dropped and counted
  maxBytes?: number; // per message, 256 KiB
  /**
   * The largest message the broker takes (Kafka's message.max.bytes, 1 MiB by default):
   * a larger one (a single huge key) is not sent but dropped and counted, as the broker
   * would refuse it. kafkajs has no such check of its own.
   */
  maxMessageBytes?: number;
  /** How long close() waits for a broker that does not answer, twice this (5000 ms). */
  sendTimeoutMs?: number;
  /** Idempotent writes (true): a request the broker may have appended is retried with its sequence numbers, never re-sent as new counts. */
  idempotent?: boolean;
  kafka?: Omit<KafkaConfig, "brokers">;
}

/**
 * What the reporter sent and lost. Every recorded access ends up in exactly one of sent
 * and dropped, or is still buffered: recorded = sent + dropped + buffered. Counts are in
 * accesses; messages and sendErrors in messages.
 */
export interface ReporterStats {
  recorded: number; // accesses passed to record()
  sent: number; // accesses in messages the broker acknowledged
  messages: number; // messages the broker acknowledged
  /** Accesses lost and counted: the buffer full (maxKeys), a count over 2^32-1, a message that failed for good (too large, not authorized), unsent at close. */
  dropped: number;
  sendErrors: number; // messages whose produce failed
  requeued: number; // accesses of failed messages merged back to be sent by a later flush
}

/** One reporter message and the counts it carries. */
export interface ReportMessage {
  value: Buffer;
  items: [Buffer, number][];
}

export class Reporter {
  readonly stats: ReporterStats = { recorded: 0, sent: 0, messages: 0, dropped: 0, sendErrors: 0, requeued: 0 };
  private counts = new Map<string, number>(); // latin1 of the key bytes -> count
  private producer?: Producer; // from start() on
  private kafka?: Kafka;
  private partitions = 0;
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();
  private idempotentWrites: boolean;
  private closed = false; // close() gave up on the broker: late results change no stat
  private readonly pending = new Set<ReportMessage>(); // sent, result not known yet
  private readonly o: Required<Omit<ReporterOptions, "kafka">>;
  private readonly kafkaOpts: ReporterOptions["kafka"];

  constructor(opts: ReporterOptions) {
    this.o = { flushIntervalMs: 100, maxKeys: 100_000, maxBytes: 256 << 10, maxMessageBytes: 1 << 20, sendTimeoutMs: 5000, idempotent: true, ...opts };
    this.kafkaOpts = opts.kafka;
    this.idempotentWrites = this.o.idempotent;
  }

  /**
   * Plain writes: kafkajs must not retry on its own (a timed-out request the broker
   * appends later plus its retry would count twice), and a send whose outcome is unknown
   * (timeout, lost connection) is dropped and counted, never re-sent.
   */
  private plainProducer(): Producer {
    return this.kafka!.producer({ allowAutoTopicCreation: false, retry: { retries: 0 } });
  }

  /** Whether the producer writes idempotently (false when asked not to, or the broker has no producer ids). */
  get idempotent(): boolean {
    return this.idempotentWrites;
  }

  async start(): Promise<this> {
    const { Kafka } = await loadKafkajs();
    this.kafka = new Kafka({ clientId: "hotkeyd-reporter", logLevel: 0, ...this.kafkaOpts, brokers: this.o.brokers });
    // Idempotent (kafkajs retries a request with the same sequence numbers until the broker
    // answers, and the broker drops a duplicate): a request that timed out on a stalled
    // broker and is appended when it resumes is never sent again as new counts.
    this.producer = this.idempotentWrites ? this.kafka.producer({ allowAutoTopicCreation: false, idempotent: true }) : this.plainProducer();
    try {
      await this.producer.connect();
    } catch (err) {
      // A broker without InitProducerId (Tansu answers it with an error): plain writes.
      if (!this.idempotentWrites || (err as { name?: string }).name !== "KafkaJSProtocolError") throw err;
      this.idempotentWrites = false;
      await this.producer.disconnect().catch(() => {}); // its connections would keep the process alive
      this.producer = this.plainProducer();
      await this.producer.connect();
    }
    this.timer = setInterval(() => {
      this.flushing = this.flushing.then(() => this.flush(false));
    }, this.o.flushIntervalMs);
    this.timer.unref();
    return this;
  }

  /** Count n accesses of key (never blocks, never throws for a full buffer). */
  record(key: unknown, n = 1): void {
    const id = keyBytes(key).toString("latin1");
    this.stats.recorded += n;
    const c = this.counts.get(id);
    if (c !== undefined || this.counts.size < this.o.maxKeys) this.counts.set(id, (c ?? 0) + n);
    else this.stats.dropped += n;
  }

  /**
   * Send what is buffered and disconnect, waiting at most 2 x sendTimeoutMs for a broker
   * that does not answer; counts that cannot be sent (or whose delivery is still unknown
   * then) are counted as dropped.
   */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    const done = this.flushing.then(() => this.flush(true));
    let timer: NodeJS.Timeout | undefined;
    const gaveUp = await Promise.race([
      done.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), 2 * this.o.sendTimeoutMs))),
    ]);
    clearTimeout(timer);
    if (gaveUp) {
      this.closed = true;
      for (const m of this.pending) this.stats.dropped += total(m);
      this.pending.clear();
      for (const n of this.counts.values()) this.stats.dropped += n;
      this.counts.clear();
    }
    if (!this.producer) return; // never started
    await Promise.race([this.producer.disconnect().catch(() => {}), new Promise((r) => setTimeout(r, this.o.sendTimeoutMs).unref())]);
  }

  private async flush(final: boolean): Promise<void> {
    if (this.closed || this.counts.size === 0 || !this.kafka) return; // not started: nothing to send with
    const counts = this.counts;
    this.counts = new Map();
    try {
      if (this.partitions === 0) {
        const admin = this.kafka.admin();
        await admin.connect();
        try {
          const md = await admin.fetchTopicMetadata({ topics: [this.o.topic] });
          this.partitions = md.topics[0].partitions.length;
        } finally {
          await admin.disconnect();
        }
      }
    } catch {
      this.putBack(counts, final); // no metadata yet: nothing was sent
      return;
    }
    const byPart = new Map<number, [Buffer, number][]>();
    for (const [id, n0] of counts) {
      const k = Buffer.from(id, "latin1");
      const n = Math.min(n0, MAX_REPORT_COUNT); // the daemon's limit: the excess is dropped and counted
      this.stats.dropped += n0 - n;
      const p = partitionFor(k, this.partitions);
      let l = byPart.get(p);
      if (!l) byPart.set(p, (l = []));
      l.push([k, n]);
    }
    // One send per message, so each message keeps the counts it carries until its own
    // produce result is known: delivered -> sent; failed -> only its counts are merged back
    // (or dropped and counted when a retry cannot help). One kafkajs send of the whole
    // flush failed as a whole when the broker refused one partition's batch (too large)
    // although it appended the others: re-sending the flush counted those keys twice.
    const retry = new Map<string, number>();
    const sends: Promise<void>[] = [];
    for (const [partition, items] of byPart)
      for (const m of encodeMessages(items, this.o.maxBytes)) {
        if (m.value.length > this.o.maxMessageBytes) {
          this.stats.sendErrors++;
          this.stats.dropped += total(m);
          continue;
        }
        this.pending.add(m);
        sends.push(this.sendOne(partition, m, final, retry));
      }
    await Promise.all(sends);
    if (retry.size > 0) {
      for (const n of retry.values()) this.stats.requeued += n;
      this.putBack(retry, final);
    }
  }

  /** Send one message; its counts go to sent, to dropped, or (a retriable failure) into retry. */
  private async sendOne(partition: number, m: ReportMessage, final: boolean, retry: Map<string, number>): Promise<void> {
    let err: unknown;
    try {
      const res = await this.producer!.send({ topic: this.o.topic, messages: [{ partition, value: m.value }] });
      // kafkajs leaves out, silently, a partition its metadata does not know.
      if (!res.some((r) => r.partition === partition && r.errorCode === 0)) err = new Error(`partition ${partition} not acknowledged`);
    } catch (e) {
      err = e ?? new Error("send failed");
    }
    if (!this.pending.delete(m)) return; // close() gave up on it and counted it as dropped
    if (err === undefined) {
      this.stats.messages++;
      this.stats.sent += total(m);
      return;
    }
    this.stats.sendErrors++;
    if (final || permanent(err) || (!this.idempotentWrites && unknownOutcome(err))) this.stats.dropped += total(m);
    else for (const [k, n] of m.items) retry.set(k.toString("latin1"), (retry.get(k.toString("latin1")) ?? 0) + n);
  }

  /** Merge unsent counts into the buffer (bounded by maxKeys), or drop them when closing. */
  private putBack(counts: Map<string, number>, final: boolean): void {
    for (const [id, n] of counts) {
      const c = this.counts.get(id);
      if (!final && !this.closed && (c !== undefined || this.counts.size < this.o.maxKeys)) this.counts.set(id, (c ?? 0) + n);
      else this.stats.dropped += n;
    }
  }
}

function total(m: ReportMessage): number {
  let t = 0;
  for (const [, n] of m.items) t += n;
  return t;
}

/** A failure after which the broker may still have appended the message (a timeout, a lost connection). */
function unknownOutcome(err: unknown): boolean {
  for (let e = err as { name?: string; cause?: unknown } | undefined, i = 0; e && i < 5; e = e.cause as typeof e, i++)
    if (e.name === "KafkaJSRequestTimeoutError" || e.name === "KafkaJSConnectionError" || e.name === "KafkaJSConnectionClosedError") return true;
  return false;
}

/**
 * A produce error that sending the same counts again cannot fix: a non-retriable broker
 * error (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE, not authorized ...). Retries running
 * out (timeouts, connection errors, retriable broker errors) is not.
 */
function permanent(err: unknown): boolean {
  const e = err as { name?: string; retriable?: boolean } | null;
  return !!e && e.name !== "KafkaJSNumberOfRetriesExceeded" && e.retriable === false;
}

function linesSafe(k: Buffer): boolean {
  return k.length > 0 && k[0] !== 0x7b && !k.includes(9) && !k.includes(10) && !k.includes(13);
}

/** Reporter messages: counted lines, then JSON batches for keys that cannot be lines. */
export function encodeCounts(items: [Buffer, number][], maxBytes = 256 << 10): Buffer[] {
  return encodeMessages(items, maxBytes).map((m) => m.value);
}

/** encodeCounts, each message with the counts it carries (each capped at MAX_REPORT_COUNT). */
export function encodeMessages(items: [Buffer, number][], maxBytes = 256 << 10): ReportMessage[] {
  const out: ReportMessage[] = [];
  let lines: Buffer[] = [];
  let lineItems: [Buffer, number][] = [];
  let size = 0;
  let odd: unknown[] = [];
  let oddItems: [Buffer, number][] = [];
  let oddSize = 0;
  for (const [k, n0] of items) {
    const n = Math.min(n0, MAX_REPORT_COUNT);
    if (linesSafe(k)) {
      const line = Buffer.concat([k, Buffer.from(`\t${n}\n`)]);
      if (size + line.length > maxBytes && lines.length > 0) {
        out.push({ value: Buffer.concat(lines), items: lineItems });
        lines = [];
        lineItems = [];
        size = 0;
      }
      lines.push(line);
      lineItems.push([k, n]);
      size += line.length;
    } else {
      const est = k.length * 2 + 24;
      if (oddSize + est > maxBytes && odd.length > 0) {
        out.push({ value: Buffer.from(JSON.stringify({ v: 1, keys: odd })), items: oddItems });
        odd = [];
        oddItems = [];
        oddSize = 0;
      }
      odd.push(isUtf8(k) ? [k.toString("utf8"), n] : [k.toString("base64"), n, "b64"]);
      oddItems.push([k, n]);
      oddSize += est;
    }
  }
  if (lines.length > 0) out.push({ value: Buffer.concat(lines), items: lineItems });
  if (odd.length > 0) out.push({ value: Buffer.from(JSON.stringify({ v: 1, keys: odd })), items: oddItems });
  return out;
}

/** kafkajs, loaded on the first Reporter.start(); one clear error when it is not installed. */
async function loadKafkajs(): Promise<typeof import("kafkajs")> {
  try {
    return await import("kafkajs");
  } catch (err) {
    if ((err as { code?: string }).code === "ERR_MODULE_NOT_FOUND") {
      throw new Error("the hotkeyd Reporter needs kafkajs, an optional peer dependency: npm install kafkajs", { cause: err });
    }
    throw err;
  }
}
