import { createServer } from 'node:http';
import { loadConfigOrExit } from './platform/config.js';
import { createLogger } from './platform/logging.js';
import { handleProcessEvents } from './platform/process-lifecycle.js';
import { loadOrCreateSecret } from './platform/secret-files.js';
import { type BrowserHost, createBrowserHost } from './platform/vm/browser-host.js';
import { localProvider } from './platform/vm/from-config.js';

/**
 * A browser host process (`npm run browser-host`): this machine's room browsers, configured by
 * the same CHROMIUM_PATH and VM_* variables as a node's, served to the Parlor nodes that list it
 * in VM_HOSTS. It listens on HOST:BROWSER_HOST_PORT. Its token is VM_HOST_TOKEN, or one kept in
 * DATA_DIR/vm-host-token (created on first start; give the same value to the nodes). Signals and
 * crashes are handled as in the API server (platform/process-lifecycle.ts): the browsers are
 * closed before the process exits.
 */
async function main() {
  const config = loadConfigOrExit('parlor browser host', 'browser-host');
  const log = createLogger(config.logLevel);
  let host: BrowserHost | null = null;
  let starting: Promise<unknown> = Promise.resolve();
  const events = handleProcessEvents({
    log,
    // A start in progress is let finish (bounded by the cap), so what it opened is closed too.
    close: async () => {
      await starting.catch(() => {});
      await host?.close();
      log.info('browser host closed');
    },
  });
  log.info('starting');

  const start = async () => {
    const warn = (message: string) => log.warn(message);
    const token = loadOrCreateSecret(config.vmHostToken, config.dataDir, 'vm-host-token', 'vht_', warn);
    const server = createServer((_req, res) => {
      res.writeHead(404).end();
    });
    host = createBrowserHost(server, {
      provider: localProvider(config, warn),
      token: token.value,
      log: warn,
      // A room reaches private networks only when this host allows it too (browser-host.ts).
      allowPrivateNetworks: config.vmAllowPrivateNetworks,
    });
    if (events.stopping) return null;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(config.browserHostPort, config.host, resolve);
    });
    return { server, token };
  };
  const started = start();
  starting = started;
  const serving = await started;
  if (!serving) return;
  const address = serving.server.address();
  const where = typeof address === 'object' && address ? `${config.host}:${address.port}` : String(address);
  process.stdout.write(
    [
      `Parlor browser host is serving ${where} (at most ${config.vmMaxPerNode} rooms)`,
      `  token: ${serving.token.file ?? 'from VM_HOST_TOKEN'}`,
      '',
    ].join('\n'),
  );
}

main().catch((e: unknown) => {
  process.stderr.write(`parlor browser host: failed to start: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
