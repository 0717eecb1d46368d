// The Lua scripts live once, in the repository's spec/lua; the package ships a copy made
// at build time (never committed), so every client runs byte-identical scripts.
import { cpSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const src = join(here, "..", "..", "..", "spec", "lua");
const dst = join(here, "..", "lua");
mkdirSync(dst, { recursive: true });
cpSync(src, dst, { recursive: true });
