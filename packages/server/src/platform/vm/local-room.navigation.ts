import type { CdpPipe } from './cdp.js';
import type { VmNavigation } from './provider.js';

/**
 * A navigation command sent while the tab is between two pages (a navigation committing, some
 * 50-100 ms after the previous one was answered) fails with "Not attached to an active page";
 * it is sent again every NAV_RETRY_MS for up to NAV_SETTLE_MS before the caller hears that the
 * browser did not take it.
 */
export const NAV_SETTLE_MS = 1_000;
export const NAV_RETRY_MS = 100;
export const BETWEEN_PAGES = /not attached to an active page/i;

/** Sends one navigation of the room's tab: a URL, reload, or a step back or forward in its history. */
export async function navigateWith(cdp: CdpPipe, s: string, nav: VmNavigation): Promise<void> {
  if ('url' in nav) {
    await cdp.send('Page.navigate', { url: nav.url }, s);
    return;
  }
  if (nav.action === 'reload') {
    await cdp.send('Page.reload', {}, s);
    return;
  }
  const history = (await cdp.send('Page.getNavigationHistory', {}, s)) as {
    currentIndex: number;
    entries: { id: number }[];
  };
  const entry = history.entries[history.currentIndex + (nav.action === 'back' ? -1 : 1)];
  if (entry) await cdp.send('Page.navigateToHistoryEntry', { entryId: entry.id }, s);
}
