/**
 * Key -> bytes, the one rule every hotkeyd client shares (spec/vectors/keys.json):
 * Buffer/Uint8Array as is, string as UTF-8 (a lone surrogate is refused), integers
 * (bigint or an integral number given as `{int: n}`) in decimal, numbers as Python's
 * repr(float). Anything else is refused, so a key never maps to different bytes in
 * different languages.
 */
export type KeyInput = string | Uint8Array | bigint;

export class KeyError extends TypeError {}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

export function keyBytes(key: unknown): Buffer {
  if (typeof key === "string") {
    if (LONE_SURROGATE.test(key)) throw new RangeError("key text is not valid Unicode (lone surrogate)");
    return Buffer.from(key, "utf8");
  }
  if (key instanceof Uint8Array) return Buffer.from(key.buffer, key.byteOffset, key.byteLength);
  if (typeof key === "bigint") return Buffer.from(key.toString(10), "ascii");
  if (typeof key === "number") return Buffer.from(pyFloatRepr(key), "ascii");
  throw new KeyError(`a key must be a string, bytes, a bigint or a number, not ${key === null ? "null" : typeof key}`);
}

/** Python's repr(float): shortest round-trip digits; exponent form outside [1e-4, 1e16). */
export function pyFloatRepr(f: number): string {
  if (Number.isNaN(f)) return "nan";
  if (f === Infinity) return "inf";
  if (f === -Infinity) return "-inf";
  const neg = f < 0 || Object.is(f, -0);
  const [mant, expStr] = Math.abs(f).toExponential().split("e");
  const exp = Number(expStr);
  const digits = mant.replace(".", "");
  let out: string;
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      out = digits.length <= exp + 1
        ? digits + "0".repeat(exp + 1 - digits.length) + ".0"
        : digits.slice(0, exp + 1) + "." + digits.slice(exp + 1);
    } else {
      out = "0." + "0".repeat(-exp - 1) + digits;
    }
  } else {
    const m = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
    const e = Math.abs(exp);
    out = `${m}e${exp < 0 ? "-" : "+"}${e < 10 ? "0" + e : e}`;
  }
  return neg ? "-" + out : out;
}
