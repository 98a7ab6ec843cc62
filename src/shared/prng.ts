/**
 * Deterministic pseudo-random numbers for seeded runs (the simulator's fault schedules, the
 * reliability workload). mulberry32: 32-bit state, fast, good enough for fault schedules (not
 * for cryptography). Every operation gets its own stream derived
 * from (seed, operation index), so the fault plan of operation i does not depend on how many
 * numbers other operations drew, nor on timing.
 */
export interface Prng {
  /** Uniform in [0, 1). */
  next(): number;
  /** Uniform integer in [min, max] (inclusive). */
  int(min: number, max: number): number;
  /** true with probability p. */
  chance(p: number): boolean;
}

export function mulberry32(seed: number): Prng {
  let state = seed >>> 0;
  const next = (): number => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
  return {
    next,
    int: (min, max) => min + Math.floor(next() * (max - min + 1)),
    chance: (p) => p > 0 && next() < p,
  };
}

/** A 32-bit seed for stream `index` of `seed` (murmur3 finalizer over both). */
export function deriveSeed(seed: number, index: number): number {
  let h = (seed >>> 0) ^ Math.imul(index + 1, 0x9e3779b1);
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}
