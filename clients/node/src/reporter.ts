/**
 * Reporter: applications count their own key accesses and send aggregates to Kafka,
 * partitioned exactly like every hotkeyd reporter (murmur3_32(key, 0) mod partitions),
 * so all accesses of a key from every app and language reach one daemon of the group.
 */
import { Kafka, type KafkaConfig, type Producer } from "kafkajs";
import { isUtf8 } from "node:buffer";
import { keyBytes } from "./keys.js";
import { partitionFor } from "./murmur3.js";

export const MAX_REPORT_COUNT = 2 ** 32 - 1;

export interface ReporterOptions {
  brokers: string[];
  topic: string;
  flushIntervalMs?: number; // 100
  maxKeys?: number; // 100000 distinct keys between flushes; more are dropped and counted
  maxBytes?: number; // per message, 256 KiB
  kafka?: Omit<KafkaConfig, "brokers">;
}

export interface ReporterStats {
  recorded: number;
  sent: number;
  messages: number;
  dropped: number;
  sendErrors: number;
}

export class Reporter {
  readonly stats: ReporterStats = { recorded: 0, sent: 0, messages: 0, dropped: 0, sendErrors: 0 };
  private counts = new Map<string, number>(); // latin1 of the key bytes -> count
  private producer: Producer;
  private kafka: Kafka;
  private partitions = 0;
  private timer?: NodeJS.Timeout;
  private flushing: Promise<void> = Promise.resolve();
  private readonly o: Required<Omit<ReporterOptions, "kafka">>;

  constructor(opts: ReporterOptions) {
    this.o = { flushIntervalMs: 100, maxKeys: 100_000, maxBytes: 256 << 10, ...opts };
    this.kafka = new Kafka({ clientId: "hotkeyd-reporter", logLevel: 0, ...opts.kafka, brokers: opts.brokers });
    this.producer = this.kafka.producer({ allowAutoTopicCreation: false });
  }

  async start(): Promise<this> {
    await this.producer.connect();
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

  /** Send what is buffered and disconnect; counts that cannot be sent are counted as dropped. */
  async close(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.flushing;
    await this.flush(true);
    await this.producer.disconnect();
  }

  private async flush(final: boolean): Promise<void> {
    if (this.counts.size === 0) return;
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
      const byPart = new Map<number, [Buffer, number][]>();
      for (const [id, n] of counts) {
        const k = Buffer.from(id, "latin1");
        const p = partitionFor(k, this.partitions);
        let l = byPart.get(p);
        if (!l) byPart.set(p, (l = []));
        l.push([k, n]);
      }
      const messages = [...byPart].flatMap(([p, items]) => encodeCounts(items, this.o.maxBytes).map((value) => ({ partition: p, value })));
      await this.producer.send({ topic: this.o.topic, messages });
      this.stats.messages += messages.length;
      for (const n of counts.values()) this.stats.sent += n;
    } catch {
      this.stats.sendErrors++;
      if (final) for (const n of counts.values()) this.stats.dropped += n;
      else
        for (const [id, n] of counts) {
          const c = this.counts.get(id);
          if (c !== undefined || this.counts.size < this.o.maxKeys) this.counts.set(id, (c ?? 0) + n);
          else this.stats.dropped += n;
        }
    }
  }
}

function linesSafe(k: Buffer): boolean {
  return k.length > 0 && k[0] !== 0x7b && !k.includes(9) && !k.includes(10) && !k.includes(13);
}

/** Reporter messages: counted lines, then JSON batches for keys that cannot be lines. */
export function encodeCounts(items: [Buffer, number][], maxBytes = 256 << 10): Buffer[] {
  const out: Buffer[] = [];
  let lines: Buffer[] = [];
  let size = 0;
  let odd: unknown[] = [];
  let oddSize = 0;
  for (const [k, n0] of items) {
    const n = Math.min(n0, MAX_REPORT_COUNT);
    if (linesSafe(k)) {
      const line = Buffer.concat([k, Buffer.from(`\t${n}\n`)]);
      if (size + line.length > maxBytes && lines.length > 0) {
        out.push(Buffer.concat(lines));
        lines = [];
        size = 0;
      }
      lines.push(line);
      size += line.length;
    } else {
      const est = k.length * 2 + 24;
      if (oddSize + est > maxBytes && odd.length > 0) {
        out.push(Buffer.from(JSON.stringify({ v: 1, keys: odd })));
        odd = [];
        oddSize = 0;
      }
      odd.push(isUtf8(k) ? [k.toString("utf8"), n] : [k.toString("base64"), n, "b64"]);
      oddSize += est;
    }
  }
  if (lines.length > 0) out.push(Buffer.concat(lines));
  if (odd.length > 0) out.push(Buffer.from(JSON.stringify({ v: 1, keys: odd })));
  return out;
}
