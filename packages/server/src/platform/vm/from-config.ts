import type { Config } from '../config.js';
import { LocalChromiumProvider } from './local-provider.js';
import type { VmProvider } from './provider.js';
import { RemoteBrowserProvider } from './remote-provider.js';

/** This machine's browsers, as CHROMIUM_PATH and the VM_* variables configure them. */
export function localProvider(config: Readonly<Config>, log: (message: string) => void): LocalChromiumProvider {
  return new LocalChromiumProvider({
    chromiumPath: config.chromiumPath,
    maxRooms: config.vmMaxPerNode,
    torProxy: config.vmTorProxy,
    regionProxies: { us: config.vmProxyUs, eu: config.vmProxyEu },
    browserUser: config.vmBrowserUser,
    sandbox: config.vmSandbox,
    browserUids: config.vmBrowserUids,
    log,
  });
}

/** A node's room VMs: on its browser hosts when VM_HOSTS names some, else on this machine. */
export function vmProviderFor(config: Readonly<Config>, log: (message: string) => void): VmProvider {
  if (config.vmHosts.length > 0 && config.vmHostToken)
    return new RemoteBrowserProvider({
      hosts: config.vmHosts,
      token: config.vmHostToken,
      log,
      startTimeoutMs: config.vmHostStartTimeoutMs,
    });
  return localProvider(config, log);
}
