// report: sends key counts to Kafka through the Node Reporter, one "key count" pair per
// stdin line (see clients/go/examples/report).
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { Reporter } from "../src/index.js";

const { values: a } = parseArgs({
  options: { brokers: { type: "string", default: "127.0.0.1:9092" }, topic: { type: "string", default: "hotkeyd-accesses" } },
});
const r = await new Reporter({ brokers: a.brokers.split(","), topic: a.topic }).start();
for await (const line of createInterface({ input: process.stdin })) {
  const i = line.indexOf(" ");
  if (i < 0) r.record(line);
  else r.record(line.slice(0, i), Number(line.slice(i + 1)) || 1);
}
await r.close();
process.stdout.write(JSON.stringify(r.stats) + "\n");
