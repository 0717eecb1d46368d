package io.hotkeyd;

/** MurmurHash3 x86_32, as the Python client (mmh3) computes it; unsigned result in a long. */
public final class Murmur3 {
  private Murmur3() {}

  public static long hash32(byte[] data, int seed) {
    final int c1 = 0xcc9e2d51;
    final int c2 = 0x1b873593;
    int h = seed;
    int n = data.length / 4;
    for (int i = 0; i < n; i++) {
      int o = i * 4;
      int k = (data[o] & 0xff) | (data[o + 1] & 0xff) << 8 | (data[o + 2] & 0xff) << 16
          | (data[o + 3] & 0xff) << 24;
      k *= c1;
      k = Integer.rotateLeft(k, 15);
      k *= c2;
      h ^= k;
      h = Integer.rotateLeft(h, 13);
      h = h * 5 + 0xe6546b64;
    }
    int t = n * 4;
    int rem = data.length & 3;
    if (rem > 0) {
      int k = 0;
      if (rem == 3) {
        k ^= (data[t + 2] & 0xff) << 16;
      }
      if (rem >= 2) {
        k ^= (data[t + 1] & 0xff) << 8;
      }
      k ^= data[t] & 0xff;
      k *= c1;
      k = Integer.rotateLeft(k, 15);
      k *= c2;
      h ^= k;
    }
    h ^= data.length;
    h ^= h >>> 16;
    h *= 0x85ebca6b;
    h ^= h >>> 13;
    h *= 0xc2b2ae35;
    h ^= h >>> 16;
    return h & 0xffffffffL;
  }

  /** The Kafka partition the reporter sends {@code key} to: murmur3(key, 0) mod partitions. */
  public static int partition(byte[] key, int partitions) {
    return (int) (hash32(key, 0) % partitions);
  }
}
