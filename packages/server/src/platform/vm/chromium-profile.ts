import { mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { processExists } from '../processes.js';

/**
 * A room browser's profile directory (chromium-process.ts makes one per launch): its preferences,
 * the TMPDIR Chromium gets in it, and the sweep of the directories dead servers left.
 */

/**
 * Preferences of every fresh profile. Network prediction off ("preload pages: never"): otherwise
 * Chromium preconnects to a page's origin before the request the network guard pauses, so a URL
 * the guard then refuses still gets a TCP connection, or a tunnel through the room's proxy
 * (seen in packages/server/test/vm-proxy.test.ts); `<link rel=preconnect>` and DNS prefetch go too.
 */
export async function writeProfilePreferences(userDataDir: string): Promise<void> {
  await mkdir(path.join(userDataDir, 'Default'));
  const prefs = { net: { network_prediction_options: 2 } };
  await writeFile(path.join(userDataDir, 'Default', 'Preferences'), JSON.stringify(prefs));
}

/** Profile directories are `<tmp>/parlor-vm-<server pid>-<random>`: the pid tells whose they are. */
export const PROFILE_PREFIX = 'parlor-vm-';

/**
 * Removes the profile directories of servers that are gone (killed before they could clean up);
 * those of live processes (this one, other servers on the machine) are left alone. Returns how
 * many it removed.
 */
export async function removeStaleProfiles(dir: string = tmpdir()): Promise<number> {
  const names = await readdir(dir).catch(() => [] as string[]);
  let removed = 0;
  for (const name of names) {
    const owner = new RegExp(`^${PROFILE_PREFIX}(\\d+)-`).exec(name)?.[1];
    if (!owner || processExists(Number(owner))) continue;
    await rm(path.join(dir, name), { recursive: true, force: true }).catch(() => {});
    removed += 1;
  }
  return removed;
}

/** The longest path of a Unix socket (sun_path's 108 bytes, less the final NUL). */
const UNIX_SOCKET_PATH_MAX = 107;

/**
 * Chromium's single-instance socket is `$TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket`, and
 * a Unix socket's path holds at most 107 bytes: with a longer one the browser exits at start
 * (`Socket path too long`). So TMPDIR is the profile only when that path fits under it (a server
 * whose own temporary folder has a long path, as on macOS, leaves Chromium its default, /tmp).
 */
export function tmpDirFor(userDataDir: string): { TMPDIR?: string } {
  const socketPath = path.join(userDataDir, 'org.chromium.Chromium.XXXXXX', 'SingletonSocket');
  return Buffer.byteLength(socketPath) <= UNIX_SOCKET_PATH_MAX ? { TMPDIR: userDataDir } : {};
}
