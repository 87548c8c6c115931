import net from 'node:net';
import type { Dial } from '../../src/platform/vm/egress-proxy.js';
import type { Lookup } from '../../src/platform/vm/network-guard.js';

/**
 * A stand-in network behind the room egress proxy (`LocalProviderOptions.testOnlyEgressNetwork`):
 * names resolve from `names` only (anything else is "not found": no real DNS is asked), and every
 * address the proxy dials is reached on 127.0.0.1 at the same port, so a test site there stands
 * for a public host. The proxy's block list stays the real one. `lookups` and `dials` record what
 * the proxy asked for (`dials` as `address:port`). An answer may be a function, called per lookup
 * (a name that answers differently each time: DNS rebinding).
 */
export function testEgressNetwork(names: Record<string, string[] | (() => string[])>) {
  const lookups: string[] = [];
  const dials: string[] = [];
  const lookup: Lookup = async (host) => {
    lookups.push(host);
    const answer = names[host];
    if (!answer) throw new Error(`ENOTFOUND ${host}`);
    return typeof answer === 'function' ? answer() : answer;
  };
  const dial: Dial = (address, port) => {
    dials.push(`${address}:${port}`);
    return net.connect({ host: '127.0.0.1', port });
  };
  return { lookups, dials, network: { lookup, dial } };
}
