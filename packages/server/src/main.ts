import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import { loadConfigOrExit } from './platform/config.js';
import type { Database } from './platform/db/index.js';
import { createLogger } from './platform/logging.js';
import { handleProcessEvents } from './platform/process-lifecycle.js';

/** Starts the service: config, app, listen; stops cleanly on SIGTERM/SIGINT and on a crash. */
async function main() {
  const config = loadConfigOrExit('parlor');
  const log = createLogger(config.logLevel);
  let app: FastifyInstance | null = null;
  let database: Database | null = null;
  let starting: Promise<unknown> = Promise.resolve();
  const events = handleProcessEvents({
    log,
    // A start in progress is let finish (START_CAP_MS), so what it opened is closed too.
    started: () => starting,
    close: async () => {
      await starting.catch(() => {});
      await app?.close();
    },
    // Past the cap: the database at least (PGlite's files written, the DATA_DIR lock released).
    lastResort: async () => {
      await database?.close();
    },
  });
  log.info('starting');

  const start = async () => {
    const built = await buildApp({ config, logger: log });
    app = built.app;
    database = built.database;
    if (events.stopping) return null;
    const address = await app.listen({ port: config.port, host: config.host });
    return { built, address };
  };
  const started = start();
  starting = started;
  const serving = await started;
  if (!serving) return;
  const { built, address } = serving;
  const coordination = config.redisUrl ? 'Redis' : 'in-process coordination';
  const mode = config.databaseUrl ? `cluster (PostgreSQL, ${coordination})` : 'embedded';
  process.stdout.write(
    [
      `Parlor is serving ${address} (${mode} mode)`,
      `  public API key: ${built.publicApiKey}`,
      `  operator token: ${built.operatorTokenFile ?? 'from OPERATOR_TOKEN'}`,
      `  API reference:  ${address}/docs`,
      '',
    ].join('\n'),
  );
}

main().catch((e: unknown) => {
  process.stderr.write(`parlor: failed to start: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
