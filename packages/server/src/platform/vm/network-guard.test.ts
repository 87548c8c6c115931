import { describe, expect, it } from 'vitest';
import { isPublicAddress, makeNetworkGuard } from './network-guard.js';

describe('isPublicAddress', () => {
  it.each([
    '127.0.0.1',
    '127.8.9.10',
    '10.1.2.3',
    '172.16.0.1',
    '172.31.255.255',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '100.100.100.200',
    '0.0.0.0',
    '224.0.0.1',
    '255.255.255.255',
    '198.18.0.1',
    '::1',
    '::',
    'fe80::1',
    'fc00::1',
    'fd00:ec2::254',
    '::ffff:127.0.0.1',
    '::ffff:7f00:1',
    '::ffff:a9fe:a9fe',
    '64:ff9b::10.0.0.1',
    '2002:c0a8:0101::1',
    '::127.0.0.1',
    'ff02::1',
    'not an address',
  ])('refuses %s', (address) => {
    expect(isPublicAddress(address)).toBe(false);
  });

  it.each([
    '93.184.216.34',
    '1.1.1.1',
    '8.8.8.8',
    '172.32.0.1',
    '100.128.0.1',
    '2606:4700:4700::1111',
    '::ffff:8.8.8.8',
  ])('allows %s', (address) => {
    expect(isPublicAddress(address)).toBe(true);
  });
});

describe('makeNetworkGuard', () => {
  const dns: Record<string, string[]> = {
    'public.example': ['93.184.216.34'],
    'mixed.example': ['93.184.216.34', '10.0.0.5'],
    localhost: ['127.0.0.1', '::1'],
    'rebind.example': ['169.254.169.254'],
  };
  const guard = makeNetworkGuard({
    lookup: async (host) => {
      const found = dns[host];
      if (!found) throw new Error('ENOTFOUND');
      return found;
    },
  });

  it('allows hosts that resolve only to public addresses', async () => {
    expect(await guard.check('https://public.example/path?q=1')).toBe('allowed');
    expect(await guard.check('wss://public.example/socket')).toBe('allowed');
  });

  it('blocks hosts with any private, loopback or metadata address, and such literals', async () => {
    for (const url of [
      'http://mixed.example/',
      'http://localhost:8080/',
      'http://rebind.example/latest/meta-data',
      'http://127.0.0.1/',
      'http://[::1]:3000/',
      'http://2130706433/',
      'http://0x7f.1/',
      'http://[::ffff:169.254.169.254]/',
    ]) {
      expect(await guard.check(url), url).toBe('blocked');
    }
  });

  it('blocks non-network schemes that would reach the host, and reports unknown names', async () => {
    expect(await guard.check('file:///etc/passwd')).toBe('blocked');
    expect(await guard.check('chrome://settings')).toBe('blocked');
    expect(await guard.check('data:text/plain,hi')).toBe('allowed');
    expect(await guard.check('http://nowhere.example/')).toBe('unresolved');
  });
});

describe('makeNetworkGuard without local lookups (rooms behind Tor)', () => {
  const lookups: string[] = [];
  const guard = makeNetworkGuard({
    lookup: async (host) => {
      lookups.push(host);
      return ['10.0.0.5'];
    },
  });
  const check = (url: string) => guard.check(url, { resolve: false });

  it('lets every host name through unresolved, .onion included: the proxy resolves it', async () => {
    for (const url of ['http://parlor-test.onion/', 'https://private.example/', 'ws://anything.example:8080/'])
      expect(await check(url), url).toBe('allowed');
    expect(lookups).toEqual([]);
  });

  it('still blocks what needs no lookup: private and loopback literals, localhost names, local schemes', async () => {
    for (const url of [
      'http://127.0.0.1/',
      'http://[::1]:3000/',
      'http://2130706433/',
      'http://10.0.0.5/',
      'http://[::ffff:169.254.169.254]/',
      'http://localhost:8080/',
      'http://LOCALHOST./',
      'http://api.localhost/',
      'file:///etc/passwd',
    ]) {
      expect(await check(url), url).toBe('blocked');
    }
    expect(await check('http://93.184.216.34/')).toBe('allowed');
    expect(lookups).toEqual([]);
  });
});
