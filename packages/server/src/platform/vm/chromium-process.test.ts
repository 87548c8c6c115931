import { describe, expect, it } from 'vitest';
import { chromiumArgs, proxyArgs } from './chromium-process.js';
import { tmpDirFor } from './chromium-profile.js';

describe('proxyArgs', () => {
  it('adds nothing for a room without a proxy', () => {
    expect(proxyArgs(null)).toEqual([]);
    expect(chromiumArgs('/tmp/p', { width: 640, height: 360 }).some((a) => a.startsWith('--proxy'))).toBe(false);
  });

  it('sends a region room through its proxy, loopback included', () => {
    expect(proxyArgs({ server: 'http://proxy.internal:3128', remoteDns: false })).toEqual([
      '--proxy-server=http://proxy.internal:3128',
      '--proxy-bypass-list=<-loopback>',
    ]);
  });

  it('resolves no name locally behind Tor except the proxy’s own host', () => {
    expect(proxyArgs({ server: 'socks5://tor:9050', remoteDns: true })).toEqual([
      '--proxy-server=socks5://tor:9050',
      '--proxy-bypass-list=<-loopback>',
      '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE tor',
    ]);
    expect(proxyArgs({ server: 'socks5://[::1]:9050', remoteDns: true }).at(-1)).toBe(
      '--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE ::1',
    );
  });

  it('puts the proxy flags before the start page, which stays the last argument', () => {
    const args = chromiumArgs(
      '/tmp/p',
      { width: 640, height: 360 },
      { server: 'socks5://127.0.0.1:9050', remoteDns: true },
    );
    expect(args).toContain('--proxy-server=socks5://127.0.0.1:9050');
    expect(args.at(-1)).toBe('about:blank');
  });
});

describe('tmpDirFor', () => {
  // `<dir>/org.chromium.Chromium.XXXXXX/SingletonSocket` is the directory plus 45 bytes; a Unix
  // socket's path holds 107.
  it('gives Chromium the profile as TMPDIR while its socket path fits there (107 bytes)', () => {
    const fits = `/${'a'.repeat(61)}`;
    expect(tmpDirFor(fits)).toEqual({ TMPDIR: fits });
    expect(tmpDirFor('/tmp/parlor-vm-12345-AbCdEf')).toEqual({ TMPDIR: '/tmp/parlor-vm-12345-AbCdEf' });
  });

  it('leaves TMPDIR unset, Chromium on /tmp, for a profile one byte too long', () => {
    expect(tmpDirFor(`/${'a'.repeat(62)}`)).toEqual({});
    expect(tmpDirFor(`/var/folders/zz/zyxvpxvq6csfxvn_n0000000000000/T/parlor-vm-4242-AbCdEf`)).toEqual({});
  });
});
