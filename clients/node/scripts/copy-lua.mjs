// The Lua scripts and the limits live once, in the repository's spec/ (spec/lua,
// spec/limits.json); the package ships a copy made at build time (never committed), so
// every client runs byte-identical scripts and enforces the same limits.
import { copyFileSync, cpSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const spec = join(here, "..", "..", "..", "spec");
const pkg = join(here, "..");
mkdirSync(join(pkg, "lua"), { recursive: true });
cpSync(join(spec, "lua"), join(pkg, "lua"), { recursive: true });
mkdirSync(join(pkg, "spec"), { recursive: true });
copyFileSync(join(spec, "limits.json"), join(pkg, "spec", "limits.json"));
