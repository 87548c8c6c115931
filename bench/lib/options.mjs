/** Scenario option parsing shared by every bench scenario. */

/** An integer option in min..max, or `def` when not given; anything else stops the run with a clear message. */
export function intOpt(v, def, min, max) {
  if (v === undefined) return def;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(`option must be an integer ${min}..${max} (got ${v})`);
  return n;
}
