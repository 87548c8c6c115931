import { VM_VIEWPORT } from '@parlor/protocol';
import { appError } from '../../platform/errors.js';
import { calledOff } from '../../platform/vm/chromium-process.js';
import type { VmProvider } from '../../platform/vm/provider.js';
import type { VmCluster } from './vm.cluster.js';
import type { ControlledRoom } from './vm.control.js';
import type { WatchedRoom } from './vm.screencast.js';
import { type RoomVmSettings, resolveSettings, type SettingsSource } from './vm.settings.js';

/**
 * A room this node runs: what its screencast keeps (vm.screencast.ts) and what control does
 * (vm.control.ts). It is in `hosted` from its browser's launch, so that other nodes reading the
 * room map's running mark find it here; it runs (`live`: credentials, watching, statistics) only
 * once that mark is written. Until then it is still starting, and a stop may call it off.
 */
export type HostedRoom = WatchedRoom & ControlledRoom & { live: boolean };

/** A start in progress on this node; a stop asked meanwhile calls it off. */
export interface Launch {
  done: Promise<void>;
  calledOff: boolean;
}

/** What a launch uses of the room host (vm.host.ts): its provider, the room map, this node's rooms. */
export interface LaunchDeps {
  provider: VmProvider;
  cluster: VmCluster;
  hosted: Map<number, HostedRoom>;
  now: () => number;
  settingsFor: () => SettingsSource;
  /** Throws unless the chat, read now, may run its room. */
  mayRun: (chatId: number) => Promise<void>;
  announceStarted: (chatId: number) => Promise<void>;
  allowPrivateNetworks: boolean;
}

/**
 * Starts the room's browser on this node (the caller claimed the room in the room map, or `after`,
 * the stop it follows, released it and this claims it again), adds it to `hosted`, marks it running
 * in the room map and announces it. A launch called off, or one whose claim another node took over,
 * leaves no browser and no map entry.
 */
export async function launchRoom(
  deps: LaunchDeps,
  chatId: number,
  run: Launch,
  after: Promise<void> | undefined,
): Promise<void> {
  const { provider, cluster, hosted } = deps;
  if (after) {
    // The stop this start follows released the room map entry: claim the room again for this run.
    await after.catch(() => {});
    if (!(await cluster.hold(chatId, 'starting')))
      throw appError('ERR_ROOM_START_FAILED', 'Another node took this room over while it stopped here; try again.');
  }
  try {
    // The start read the chat before this node held the room: a deletion or archiving that
    // committed since found no room to stop (chatRemoved, chatArchived look for it after their
    // commit). Read now, with the room held (in the room map and here), the chat is seen gone,
    // or the removal, committed after this read, finds the room on whichever node it runs and
    // stops it (calling off a launch still under way).
    await deps.mayRun(chatId);
    const settings = resolveSettings(await deps.settingsFor()(chatId));
    // A stop asked since leaves no browser to launch.
    if (run.calledOff) throw calledOff();
    const info = await provider.start(String(chatId), {
      browser: settings.browser,
      proxy: settings.proxy,
      startUrl: settings.start_url,
      allowPrivateNetworks: deps.allowPrivateNetworks,
      width: VM_VIEWPORT.width,
      height: VM_VIEWPORT.height,
    });
    // A stop asked while the browser started (a provider that could not kill it meanwhile): the
    // browser goes, and the start fails; nobody hears room:started.
    if (run.calledOff) {
      await provider.stop(String(chatId)).catch(() => {});
      throw calledOff();
    }
    const room = newRoom(chatId, settings, info, deps.now());
    hosted.set(chatId, room);
    const held = await cluster.hold(chatId, 'running');
    if (!held || run.calledOff) {
      // The claim lapsed while the browser started (this node stalled) and another node took the
      // room: this copy goes, the other one serves the chat. So does one stopped meanwhile.
      hosted.delete(chatId);
      await provider.stop(String(chatId)).catch(() => {});
      if (held) throw calledOff();
      throw appError('ERR_ROOM_START_FAILED', 'Another node took this room over while it was starting.');
    }
    // Only now does it run here: a start called off before this had nobody watching to tell.
    room.live = true;
  } catch (err) {
    await cluster.release(chatId).catch(() => {});
    throw err;
  }
  await deps.announceStarted(chatId);
}

/** A room whose browser just started: not running yet, nobody controls or watches it, its idle clock runs from `at`. */
function newRoom(
  chatId: number,
  settings: RoomVmSettings,
  size: { width: number; height: number },
  at: number,
): HostedRoom {
  return {
    chatId,
    settings,
    width: size.width,
    height: size.height,
    controller: null,
    audiences: new Map(),
    idleSince: at,
    unsubscribe: null,
    last: null,
    inputsInFlight: 0,
    requests: new Map(),
    live: false,
  };
}
