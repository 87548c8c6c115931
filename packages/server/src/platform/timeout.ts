/** What `withinTime` settles with when the work did not finish in time. */
export const TIMED_OUT: unique symbol = Symbol('timed out');

/**
 * The work's outcome (its value, or its rejection), or `TIMED_OUT` after `ms`. The work itself
 * goes on: the caller stops waiting, it cannot cancel it. The timer never keeps the process alive.
 */
export async function withinTime<T>(work: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(() => resolve(TIMED_OUT), ms);
    timer.unref();
  });
  try {
    return await Promise.race([work, late]);
  } finally {
    clearTimeout(timer);
  }
}
