import Fastify from 'fastify';
import { afterAll, describe, expect, it } from 'vitest';
import { addressKey, clientIp, proxyMatcher, rawClientIp, trustProxyOption } from './client-address.js';

describe('addressKey', () => {
  it.each([
    ['203.0.113.9', '203.0.113.9'],
    ['10.0.0.1', '10.0.0.1'],
  ])('keeps IPv4 address %s as it is', (ip, key) => {
    expect(addressKey(ip)).toBe(key);
  });

  it.each([
    ['::ffff:203.0.113.9', '203.0.113.9'],
    ['::FFFF:203.0.113.9', '203.0.113.9'],
    ['::ffff:cb00:7109', '203.0.113.9'],
    ['0:0:0:0:0:ffff:cb00:7109', '203.0.113.9'],
  ])('reads IPv4-mapped %s as its IPv4 address', (ip, key) => {
    expect(addressKey(ip)).toBe(key);
  });

  it.each([
    ['2001:db8:1:2::1', '2001:db8:1:2::/64'],
    ['2001:db8:1:2:aaaa:bbbb:cccc:dddd', '2001:db8:1:2::/64'],
    ['2001:0DB8:0001:0002:0000:0000:0000:0001', '2001:db8:1:2::/64'],
    ['2001:db8::1', '2001:db8:0:0::/64'],
    ['2001:db8:0:0:1::', '2001:db8:0:0::/64'],
    ['::1', '0:0:0:0::/64'],
    ['fe80::1%eth0', 'fe80:0:0:0::/64'],
    ['64:ff9b::203.0.113.9', '64:ff9b:0:0::/64'],
  ])('keys IPv6 address %s by its /64 (%s)', (ip, key) => {
    expect(addressKey(ip)).toBe(key);
  });

  it('gives every address of one /64 the same key, and neighbouring /64s others', () => {
    const keys = new Set(
      ['2001:db8:a:b::1', '2001:db8:a:b:ffff:ffff:ffff:ffff', '2001:db8:a:b:1234::9'].map(addressKey),
    );
    expect(keys.size).toBe(1);
    expect(addressKey('2001:db8:a:c::1')).not.toBe(addressKey('2001:db8:a:b::1'));
  });

  it.each(['', 'unknown', '203.0.113'])('keeps %j, which is not an address, as it is', (value) => {
    expect(addressKey(value)).toBe(value);
  });
});

describe('trustProxyOption, clientIp and rawClientIp', () => {
  /** One Fastify app per setting that answers the address clientIp reads; all closed at the end. */
  const apps: ReturnType<typeof Fastify>[] = [];
  afterAll(async () => {
    for (const app of apps) await app.close();
  });
  const ipWith = async (trust: Parameters<typeof trustProxyOption>[0], xff: string | null) => {
    const app = Fastify({ trustProxy: trustProxyOption(trust) });
    apps.push(app);
    // The raw request (an Engine.IO handshake's) must read the same address as Fastify does.
    app.get('/', async (req) => {
      const raw = rawClientIp(req.raw, trustProxyOption(trust));
      return raw === clientIp(req) ? raw : `fastify ${clientIp(req)}, raw ${raw}`;
    });
    const res = await app.inject({
      url: '/',
      remoteAddress: '10.0.0.2',
      headers: xff === null ? {} : { 'x-forwarded-for': xff },
    });
    return res.body;
  };

  it('ignores X-Forwarded-For when off', async () => {
    expect(await ipWith(false, '203.0.113.9')).toBe('10.0.0.2');
  });

  it('takes the rightmost entry behind one proxy, never one the client wrote', async () => {
    expect(await ipWith(1, '203.0.113.9')).toBe('203.0.113.9');
    expect(await ipWith(1, '198.51.100.66, 203.0.113.9')).toBe('203.0.113.9');
    expect(await ipWith(1, '1.1.1.1,198.51.100.66,  203.0.113.9')).toBe('203.0.113.9');
    expect(await ipWith(1, null)).toBe('10.0.0.2');
  });

  it('drops the port a proxy wrote with the address (each connection has another one)', async () => {
    expect(await ipWith(1, '203.0.113.9:40001')).toBe('203.0.113.9');
    expect(await ipWith(1, '198.51.100.66, 203.0.113.9:40002')).toBe('203.0.113.9');
    expect(await ipWith(1, '[2001:db8:7:7::1]:40003')).toBe('2001:db8:7:7::1');
    expect(await ipWith(1, '[2001:db8:7:7::1]')).toBe('2001:db8:7:7::1');
    expect(await ipWith(1, '[::ffff:203.0.113.9]:40004')).toBe('203.0.113.9');
    expect(addressKey(await ipWith(1, '[2001:db8:7:7::1]:40005'))).toBe('2001:db8:7:7::/64');
  });

  it('takes the Nth entry from the right behind N proxies', async () => {
    expect(await ipWith(2, '198.51.100.66, 203.0.113.9, 10.0.0.1')).toBe('203.0.113.9');
  });

  it('with a list, takes the rightmost entry that is not a listed proxy', async () => {
    expect(await ipWith(['10.0.0.0/8'], '198.51.100.66, 203.0.113.9, 10.0.0.1')).toBe('203.0.113.9');
    expect(await ipWith(['10.0.0.2', '10.0.0.1'], '198.51.100.66, 203.0.113.9, 10.0.0.1')).toBe('203.0.113.9');
    // A peer that is not a listed proxy is the client, whatever it sends.
    expect(await ipWith(['192.168.0.0/16'], '203.0.113.9')).toBe('10.0.0.2');
  });

  it("with a list, reads a proxy's own entry without the port it wrote, and named ranges", async () => {
    // The inner proxy (10.0.0.1) is listed; written with a port it is still a proxy, not the client.
    expect(await ipWith(['10.0.0.0/8'], '198.51.100.66, 203.0.113.9:40001, 10.0.0.1:40002')).toBe('203.0.113.9');
    expect(await ipWith(['10.0.0.0/8'], '203.0.113.9, [::ffff:10.0.0.1]:40003')).toBe('203.0.113.9');
    expect(await ipWith(['uniquelocal'], '203.0.113.9, 192.168.4.4:8080')).toBe('203.0.113.9');
    expect(await ipWith(['10.0.0.2', 'fd00::/8'], '203.0.113.9, [fd00::7]:443')).toBe('203.0.113.9');
    // An entry that is not an address is never a proxy: it is taken for the client.
    expect(await ipWith(['10.0.0.0/8'], '203.0.113.9, unknown')).toBe('unknown');
  });

  it('with a list, matches an IPv4-mapped peer against IPv4 ranges', () => {
    const isProxy = proxyMatcher(['10.0.0.0/8', 'loopback']);
    expect(isProxy('::ffff:10.0.0.2')).toBe(true);
    expect(isProxy('::1')).toBe(true);
    expect(isProxy('127.0.0.9:1234')).toBe(true);
    expect(isProxy('11.0.0.1')).toBe(false);
    expect(isProxy('::ffff:11.0.0.1')).toBe(false);
    expect(isProxy('')).toBe(false);
  });
});
