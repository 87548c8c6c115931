import { createServer } from 'node:http';
import { loadConfigOrExit } from './platform/config.js';
import { loadOrCreateSecret } from './platform/secret-files.js';
import { createBrowserHost } from './platform/vm/browser-host.js';
import { localProvider } from './platform/vm/from-config.js';

/**
 * A browser host process (`npm run browser-host`): this machine's room browsers, configured by
 * the same CHROMIUM_PATH and VM_* variables as a node's, served to the Parlor nodes that list it
 * in VM_HOSTS. It listens on HOST:BROWSER_HOST_PORT. Its token is VM_HOST_TOKEN, or one kept in
 * DATA_DIR/vm-host-token (created on first start; give the same value to the nodes).
 */
async function main() {
  const config = loadConfigOrExit('parlor browser host');
  const token = loadOrCreateSecret(config.vmHostToken, config.dataDir, 'vm-host-token', 'vht_');
  const log = (message: string) => process.stderr.write(`parlor browser host: ${message}\n`);
  const provider = localProvider(config, log);
  const server = createServer((_req, res) => {
    res.writeHead(404).end();
  });
  const host = createBrowserHost(server, { provider, token: token.value, log });
  let closing = false;
  const shutdown = async () => {
    if (closing) return;
    closing = true;
    const timer = setTimeout(() => process.exit(1), 10_000);
    timer.unref();
    await host.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void shutdown());
  process.on('SIGINT', () => void shutdown());
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.browserHostPort, config.host, resolve);
  });
  const address = server.address();
  const where = typeof address === 'object' && address ? `${config.host}:${address.port}` : String(address);
  process.stdout.write(
    [
      `Parlor browser host is serving ${where} (at most ${config.vmMaxPerNode} rooms)`,
      `  token: ${token.file ?? 'from VM_HOST_TOKEN'}`,
      '',
    ].join('\n'),
  );
}

main().catch((e: unknown) => {
  process.stderr.write(`parlor browser host: failed to start: ${e instanceof Error ? e.message : String(e)}\n`);
  process.exit(1);
});
