import { buildApp } from './app.js';
import { loadConfigOrExit } from './platform/config.js';

/** Starts the service: config, app, listen; stops cleanly on SIGTERM/SIGINT. */
async function main() {
  const config = loadConfigOrExit('parlor');
  const built = await buildApp({ config });
  const { app } = built;
  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    app.log.info({ signal }, 'shutting down');
    const timer = setTimeout(() => process.exit(1), 10_000);
    timer.unref();
    try {
      await app.close();
      process.exit(0);
    } catch (e) {
      app.log.error({ err: e }, 'shutdown failed');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void shutdown('SIGTERM'));
  process.on('SIGINT', () => void shutdown('SIGINT'));

  const address = await app.listen({ port: config.port, host: config.host });
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
