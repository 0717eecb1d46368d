/**
 * The limits of the contract, read from spec/limits.json: the build copies it into the
 * package (spec/limits.json beside dist/, shipped), so no number is written down here.
 */
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const FILE = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "spec", "limits.json");

const doc = JSON.parse(readFileSync(FILE, "utf8")) as { limits: Record<string, { value: number }> };

/** The value of the limit `name` (see spec/limits.json for what each means). */
export function limit(name: string): number {
  const l = doc.limits[name];
  if (l === undefined || typeof l.value !== "number") throw new Error(`hotkeyd: spec/limits.json has no limit ${name}`);
  return l.value;
}
