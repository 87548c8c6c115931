import type { FastifyBaseLogger } from 'fastify';

/**
 * Runs `task` every `ms` on this node, never two runs at once, errors logged. Every task must be
 * safe when all nodes run it (row locks, SKIP LOCKED, atomic scripts). Returns the stop function.
 */
export function every(ms: number, name: string, task: () => Promise<unknown>, log: FastifyBaseLogger): () => void {
  let running = false;
  const timer = setInterval(() => {
    if (running) return;
    running = true;
    task()
      .catch((err: unknown) => log.error({ err, task: name }, 'background task failed'))
      .finally(() => {
        running = false;
      });
  }, ms);
  timer.unref();
  return () => clearInterval(timer);
}
