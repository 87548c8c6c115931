import { isHttpUrl, Limits } from '@parlor/protocol';

/**
 * Room settings (spec 2.4) as the room VM reads them when it starts. Guild room settings are not
 * wired yet: until they are, every chat gets the defaults below. The guilds module plugs in by
 * giving the vm service a `SettingsSource` (wiring/services.ts; `vm.useSettings`), nothing else changes.
 */
export interface RoomVmSettings {
  browser: 'brave' | 'tor';
  proxy: 'us' | 'eu' | 'none';
  start_url: string;
  kiosk: boolean;
  allow_control_requests: boolean;
}

/** The settings of a chat's room, or null for the defaults. */
export type SettingsSource = (chatId: number) => Promise<Partial<RoomVmSettings> | null>;

export const DEFAULT_ROOM_SETTINGS: Readonly<RoomVmSettings> = Object.freeze({
  browser: 'brave',
  proxy: 'none',
  start_url: 'about:blank',
  kiosk: false,
  allow_control_requests: true,
});

export const defaultSettingsSource: SettingsSource = async () => null;

/**
 * Whether a start URL may be opened: about:blank or an absolute http(s) URL (never file: and the
 * like) of at most START_URL_MAX characters, counted in code points as the settings' schema counts
 * them (an emoji is one character, not two UTF-16 units).
 */
export function isOpenableUrl(url: string): boolean {
  if (url === 'about:blank') return true;
  if (url.length > Limits.START_URL_MAX && codePoints(url) > Limits.START_URL_MAX) return false;
  return isHttpUrl(url);
}

/** The defaults overlaid with what the source gives; an unusable start URL falls back to about:blank. */
export function resolveSettings(given: Partial<RoomVmSettings> | null): RoomVmSettings {
  const s = { ...DEFAULT_ROOM_SETTINGS, ...(given ?? {}) };
  return { ...s, start_url: isOpenableUrl(s.start_url) ? s.start_url : 'about:blank' };
}

/** The length of a string in code points (what JSON Schema's maxLength counts). */
function codePoints(text: string): number {
  let n = 0;
  for (const _ of text) n += 1;
  return n;
}
