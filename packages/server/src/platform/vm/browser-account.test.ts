import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { AppError } from '../errors.js';
import { resolveBrowserIdentity } from './browser-account.js';

const passwd = path.join(mkdtempSync(path.join(tmpdir(), 'parlor-passwd-')), 'passwd');
writeFileSync(
  passwd,
  [
    'root:x:0:0:root:/root:/bin/bash',
    'nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin',
    'browser:x:990:991::/home/browser:/bin/false',
    '',
  ].join('\n'),
);
const asRoot = { serverUid: 0, passwdFile: passwd };

describe('how room browsers run (resolveBrowserIdentity)', () => {
  it('a server that is not root: as itself, sandboxed unless VM_SANDBOX is off; VM_BROWSER_USER is not read', async () => {
    const server = { serverUid: 1000, passwdFile: passwd };
    expect(await resolveBrowserIdentity({ user: 'no-such-user', sandbox: true }, server)).toEqual({
      account: null,
      sandbox: true,
    });
    expect(await resolveBrowserIdentity({ user: 'nobody', sandbox: false }, server)).toEqual({
      account: null,
      sandbox: false,
    });
  });

  it('a root server: as the named account or uid[:gid], sandboxed', async () => {
    expect(await resolveBrowserIdentity({ user: 'nobody', sandbox: true }, asRoot)).toEqual({
      account: { uid: 65534, gid: 65534 },
      sandbox: true,
    });
    expect(await resolveBrowserIdentity({ user: 'browser', sandbox: true }, asRoot)).toEqual({
      account: { uid: 990, gid: 991 },
      sandbox: true,
    });
    expect(await resolveBrowserIdentity({ user: '1234:55', sandbox: true }, asRoot)).toEqual({
      account: { uid: 1234, gid: 55 },
      sandbox: true,
    });
    expect(await resolveBrowserIdentity({ user: '1234', sandbox: true }, asRoot)).toEqual({
      account: { uid: 1234, gid: 1234 },
      sandbox: true,
    });
  });

  it('a root server with VM_BROWSER_UIDS: an account per room from the range (VM_BROWSER_USER unread)', async () => {
    const uids = { first: 200000, last: 200003 };
    expect(await resolveBrowserIdentity({ user: 'no-such-user', sandbox: true, uids }, asRoot)).toEqual({
      account: null,
      sandbox: true,
      perRoom: uids,
    });
    // A server that is not root runs browsers as itself whatever the range.
    expect(await resolveBrowserIdentity({ user: 'nobody', sandbox: true, uids }, { serverUid: 1000 })).toEqual({
      account: null,
      sandbox: true,
    });
  });

  it('a root server told to keep browsers root: unsandboxed, as Chromium needs', async () => {
    for (const user of ['root', '0', '0:0'])
      expect(await resolveBrowserIdentity({ user, sandbox: true }, asRoot)).toEqual({ account: null, sandbox: false });
  });

  it('an account that does not exist: 503 ERR_ROOM_START_FAILED naming VM_BROWSER_USER', async () => {
    const err = await resolveBrowserIdentity({ user: 'nobodyx', sandbox: true }, asRoot).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(AppError);
    expect([(err as AppError).code, (err as AppError).message]).toEqual([
      'ERR_ROOM_START_FAILED',
      expect.stringMatching(/"nobodyx".*VM_BROWSER_USER/),
    ]);
  });
});
