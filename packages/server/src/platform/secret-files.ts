import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  closeSync,
  existsSync,
  fsyncSync,
  linkSync,
  mkdirSync,
  openSync,
  readFileSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { type HeaderSecret, headerSecretFault, headerSecretRule, SECRET_MIN_LENGTH } from './config.js';
import { randomToken } from './secrets.js';

/** The secrets a process may keep in DATA_DIR, by file name: the variable that replaces each. */
const SECRET_FILES = {
  'public-api-key': 'PUBLIC_API_KEY',
  'operator-token': 'OPERATOR_TOKEN',
  'vm-host-token': 'VM_HOST_TOKEN',
} as const satisfies Record<string, keyof typeof SECRET_MIN_LENGTH>;

export type SecretFileName = keyof typeof SECRET_FILES;

/** Mode of a new DATA_DIR and of the directories the server keeps in it: the server's account only. */
export const PRIVATE_DIR_MODE = 0o700;

/** What makePrivateDir did ("kept": no group or other access to take away, a new directory among them). */
export type PrivateDirOutcome =
  | { kind: 'kept' }
  | { kind: 'changed'; from: number }
  | { kind: 'shared'; mode: number }
  | { kind: 'not-owner'; mode: number };

/**
 * Makes `dir` (and missing parents) with mode 0700, or takes group and other access away from an
 * existing one (chmod to 0700 for the usual 0755): DATA_DIR holds the embedded database, whose files PGlite writes 0666, and the
 * secrets, so no other local account (a room browser's among them) may enter it. A shared
 * directory (sticky bit, like /tmp) is left as it is, since 0700 would lock every other account
 * out of it; so is one this account may not change (not its owner).
 */
export function makePrivateDir(dir: string): PrivateDirOutcome {
  // A new directory: 0700 less the umask, so never open to others.
  mkdirSync(dir, { recursive: true, mode: PRIVATE_DIR_MODE });
  const mode = statSync(dir).mode & 0o7777;
  if ((mode & 0o077) === 0) return { kind: 'kept' };
  if (mode & 0o1000) return { kind: 'shared', mode };
  try {
    // The owner's bits (and set-group-id) stay as they were.
    chmodSync(dir, mode & 0o7700);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EPERM') return { kind: 'not-owner', mode };
    throw e;
  }
  return { kind: 'changed', from: mode };
}

/** makePrivateDir, telling `log` (one line) when it changed the mode or had to leave it open. */
export function securePrivateDir(dir: string, log: (message: string) => void = () => {}): void {
  const outcome = makePrivateDir(dir);
  const octal = (m: number) => `0${m.toString(8)}`;
  if (outcome.kind === 'changed')
    log(`took group and other access away from ${dir} (mode ${octal(outcome.from)} → ${octal(outcome.from & 0o7700)})`);
  else if (outcome.kind === 'shared')
    log(`left ${dir} at mode ${octal(outcome.mode)}: a shared directory (sticky bit); give DATA_DIR one of its own`);
  else if (outcome.kind === 'not-owner')
    log(`could not take group and other access away from ${dir} (mode ${octal(outcome.mode)}): not this account's`);
}

/**
 * A secret given in configuration, else the one kept in `dataDir/name`, else a new random one
 * written there with mode 0600. A new file is written whole to a temporary file first, flushed,
 * then linked into place, which fails if the file exists: a crash leaves either no file or the
 * whole secret, and two processes starting at once never replace each other's secret. A stored
 * value shorter than its variable's minimum (an edited or damaged file) stops the start with one
 * line naming the file and the variable. DATA_DIR is made private first (makePrivateDir; `log`
 * hears of a change). A stored public API key or operator token must also keep headerSecretRule (config.ts).
 */
export function loadOrCreateSecret(
  configured: string | null,
  dataDir: string,
  name: SecretFileName,
  prefix = '',
  log?: (message: string) => void,
): { value: string; file: string | null } {
  if (configured) return { value: configured, file: null };
  securePrivateDir(dataDir, log);
  const file = path.join(dataDir, name);
  if (!existsSync(file)) createOnce(file, `${prefix}${randomToken(32)}\n`);
  chmodSync(file, 0o600);
  const value = readFileSync(file, 'utf8').trim();
  const variable = SECRET_FILES[name];
  const min = SECRET_MIN_LENGTH[variable];
  const remedy = `delete the file to have a new one made, or set ${variable}`;
  if (value.length < min)
    throw new Error(`${file} holds ${value.length} characters; ${variable} needs at least ${min}: ${remedy}`);
  // The header checks and the CLI take a stored key or token only within headerSecretRule (config.ts).
  if (variable === 'VM_HOST_TOKEN') return { value, file };
  const fault = headerSecretFault(variable satisfies HeaderSecret, value);
  if (fault !== null)
    throw new Error(`${file} holds ${fault}; ${variable} must be ${headerSecretRule(variable)}: ${remedy}`);
  return { value, file };
}

/** Errors of a file system that makes no hard links (vfat, exfat, some network and FUSE mounts). */
export const NO_HARD_LINKS = new Set(['EPERM', 'ENOTSUP', 'EOPNOTSUPP', 'EXDEV', 'ENOSYS', 'EMLINK']);

/**
 * Writes `content` to `file` with mode 0600 unless it exists. The content goes to a temporary file
 * first and is linked into place, so `file` is never seen partly written, and of two processes
 * starting at once the first link wins (a link never replaces a file). On a file system without
 * hard links it falls back to creating `file` exclusively and writing it (a crash while writing
 * may leave it short, which the read above refuses). Exported for its test (`link`).
 */
export function createOnce(file: string, content: string, link: (from: string, to: string) => void = linkSync): void {
  const temp = path.join(path.dirname(file), `.${path.basename(file)}.${randomBytes(6).toString('hex')}.tmp`);
  let linked = false;
  const fd = openSync(temp, 'wx', 0o600);
  try {
    try {
      writeFileSync(fd, content);
      fsyncSync(fd);
    } finally {
      closeSync(fd);
    }
    link(temp, file);
    linked = true;
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code ?? '';
    if (code === 'EEXIST') linked = true;
    else if (!NO_HARD_LINKS.has(code)) throw e;
  } finally {
    unlinkSync(temp);
  }
  if (!linked) writeExclusively(file, content);
}

function writeExclusively(file: string, content: string): void {
  let fd: number;
  try {
    fd = openSync(file, 'wx', 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EEXIST') return;
    throw e;
  }
  try {
    writeFileSync(fd, content);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}
