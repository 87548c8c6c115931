/**
 * Runs `batch` (which handles up to `size` rows and answers how many it handled) again while it
 * comes back full, at most `maxBatches` times: one tick of a sweep catches up with a backlog
 * without running unbounded (the next tick goes on). Answers the rows handled in all.
 */
export async function drain(size: number, maxBatches: number, batch: () => Promise<number>): Promise<number> {
  let total = 0;
  for (let i = 0; i < maxBatches; i++) {
    const n = await batch();
    total += n;
    if (n < size) break;
  }
  return total;
}
