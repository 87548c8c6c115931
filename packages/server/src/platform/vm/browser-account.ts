import { chown, readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import { appError } from '../errors.js';

/** The account a room browser runs as, when it is not the server's own. */
export interface BrowserAccount {
  uid: number;
  gid: number;
}

/** A range of uids (VM_BROWSER_UIDS), each used as a room browser's uid and gid. */
export interface UidRange {
  first: number;
  last: number;
}

/** How room browsers run: as whom, and whether inside Chromium's sandbox. */
export interface BrowserIdentity {
  /** Null: as the server's own user. */
  account: BrowserAccount | null;
  /** False adds `--no-sandbox`: Chromium cannot sandbox itself as root. */
  sandbox: boolean;
  /** Each room gets an account of its own from this range (the provider picks); `account` is unused then. */
  perRoom?: UidRange;
}

/**
 * Decides how room browsers run (docs/operations.md, "Room VMs"):
 * - a server that is not root starts them as itself, in Chromium's sandbox (unless `sandbox` is
 *   off: VM_SANDBOX=0 for hosts without unprivileged user namespaces);
 * - a server running as root (containers) starts them as `user` (VM_BROWSER_USER, `nobody` by
 *   default: a name from the passwd file or `uid[:gid]`), sandboxed, so a page that breaks out of
 *   its renderer holds neither root nor the server's files (DATA_DIR's secrets are root's, 0600).
 *   `root` keeps them root, and then unsandboxed: Chromium refuses its sandbox as root;
 * - with `uids` (VM_BROWSER_UIDS) a root server gives each room an account of its own from that
 *   range instead, so rooms cannot read each other's profiles either.
 * An account that does not exist answers 503 ERR_ROOM_START_FAILED naming VM_BROWSER_USER.
 */
export async function resolveBrowserIdentity(
  opts: { user: string; sandbox: boolean; uids?: UidRange | null },
  env: { serverUid: number; passwdFile?: string } = { serverUid: process.getuid?.() ?? -1 },
): Promise<BrowserIdentity> {
  if (env.serverUid !== 0) return { account: null, sandbox: opts.sandbox };
  if (opts.uids) return { account: null, sandbox: opts.sandbox, perRoom: opts.uids };
  const account = await lookUpAccount(opts.user, env.passwdFile ?? '/etc/passwd');
  if (account.uid === 0) return { account: null, sandbox: false };
  return { account, sandbox: opts.sandbox };
}

async function lookUpAccount(user: string, passwdFile: string): Promise<BrowserAccount> {
  const numeric = /^(\d+)(?::(\d+))?$/.exec(user);
  if (numeric) {
    const uid = Number(numeric[1]);
    return { uid, gid: numeric[2] === undefined ? uid : Number(numeric[2]) };
  }
  const passwd = await readFile(passwdFile, 'utf8').catch(() => '');
  for (const line of passwd.split('\n')) {
    const [name, , uid, gid] = line.split(':');
    if (name === user && uid !== undefined && gid !== undefined && /^\d+$/.test(uid) && /^\d+$/.test(gid))
      return { uid: Number(uid), gid: Number(gid) };
  }
  throw appError(
    'ERR_ROOM_START_FAILED',
    `The room browser's account "${user}" does not exist on this host (VM_BROWSER_USER).`,
  );
}

/** Gives a fresh profile directory (and what is in it) to the browser's account. */
export async function handOver(dir: string, account: BrowserAccount): Promise<void> {
  await chown(dir, account.uid, account.gid);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) await handOver(p, account);
    else await chown(p, account.uid, account.gid);
  }
}
