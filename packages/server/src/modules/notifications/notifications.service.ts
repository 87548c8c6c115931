import type { NotificationType } from '@parlor/protocol';
import type { Clock } from '../../platform/clock.js';
import type { Tx } from '../users/users.store.js';
import type { NotificationRow, NotificationsStore } from './notifications.store.js';

/**
 * The automated notifications of spec 2.7. Bodies are a small rich-text subset: **bold** and
 * [label](https://link). Clients render that subset only, never HTML, so a username cannot inject
 * markup; values put into a body are escaped with `plain()`.
 */
const TEMPLATES = {
  welcome: {
    type: 'success',
    title: 'Welcome to Parlor',
    body: 'Welcome, **{username}**! Set your username and avatar in your profile.',
  },
  new_ip_login: {
    type: 'warning',
    title: 'New login',
    body: 'Your account was signed in from a new address: **{ip}**. If this was not you, end that session in your session list.',
  },
  permission_changed: { type: 'info', title: 'Permission changed', body: 'Your permission level is now **{level}**.' },
} as const satisfies Record<string, { type: NotificationType; title: string; body: string }>;

export type AutomatedKind = keyof typeof TEMPLATES;

/** Escapes the rich-text markers so a value shows as typed. */
export function plain(value: string): string {
  return value.replace(/[\\*_[\]()`<>]/g, (c) => `\\${c}`);
}

export function makeNotificationsService({ store, clock }: { store: NotificationsStore; clock: Clock }) {
  return {
    async automated(
      userId: number,
      kind: AutomatedKind,
      vars: Record<string, string>,
      tx?: Tx,
    ): Promise<NotificationRow> {
      const t = TEMPLATES[kind];
      const body = t.body.replace(/\{(\w+)\}/g, (_, k: string) => plain(vars[k] ?? ''));
      return store.insert({ userId, title: t.title, body, type: t.type, createdBy: null, createdAt: clock.now() }, tx);
    },
  };
}

export type NotificationsService = ReturnType<typeof makeNotificationsService>;
