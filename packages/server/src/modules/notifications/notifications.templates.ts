import type { NotificationType } from '@parlor/protocol';

/**
 * The automated notifications of spec 2.7. Bodies are the small rich-text subset of
 * notifications.richtext.ts: **bold** and [label](https://link). Clients render that subset only,
 * never HTML; values put into a body are escaped with `plain()`, so a username cannot add markup.
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
  trial_started: {
    type: 'success',
    title: 'Trial started',
    body: 'Your **Premium trial** is active until **{until}**. Enjoy creating your own chat!',
  },
  subscription_upgraded: {
    type: 'success',
    title: 'Subscription upgraded',
    body: 'Your subscription is now **{tier}**, {until}.',
  },
  // A grant that lowers the tier in force (Lifetime to Premium): not an upgrade.
  subscription_changed: {
    type: 'info',
    title: 'Subscription changed',
    body: 'Your subscription is now **{tier}**, {until}.',
  },
  subscription_revoked: {
    type: 'warning',
    title: 'Subscription revoked',
    body: 'Your **{tier}** subscription was revoked. Your account is now Basic.',
  },
  subscription_expired: {
    type: 'info',
    title: 'Subscription expired',
    body: 'Your **{tier}** subscription ended on **{until}**. Your account is now Basic.',
  },
  // Moderation (spec 2.7's banned, unbanned, timed out, warned, kicked); `duration` is written by the caller.
  banned: {
    type: 'danger',
    title: 'Account banned',
    body: 'Your account was **banned**. Duration: **{duration}**. Reason: {reason}',
  },
  unbanned: { type: 'success', title: 'Ban lifted', body: 'Your ban was lifted. Welcome back!' },
  timed_out: {
    type: 'warning',
    title: 'Timed out',
    body: 'Your account was **timed out**. Duration: **{duration}**. Reason: {reason}',
  },
  warned: { type: 'warning', title: 'Warning', body: 'A moderator gave you a **warning**. Reason: {reason}' },
  kicked: { type: 'warning', title: 'Removed from a chat', body: 'You were **kicked** from a chat. Reason: {reason}' },
} as const satisfies Record<string, { type: NotificationType; title: string; body: string }>;

/** What an empty value reads as, where a bare gap would look broken. */
const FALLBACKS: Record<string, string> = { reason: 'none given' };

export type AutomatedKind = keyof typeof TEMPLATES;

/** Escapes the rich-text markers so a value shows as typed. */
export function plain(value: string): string {
  return value.replace(/[\\*_[\]()`<>]/g, (c) => `\\${c}`);
}

/** A moment as notification text: `2026-01-08 00:00 UTC`. */
export function formatMoment(d: Date): string {
  return `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}

/** An automated notification's row: its template filled in with `vars`, each escaped (`plain`). */
export function render(userId: number, kind: AutomatedKind, vars: Record<string, string>, at: Date) {
  const t = TEMPLATES[kind];
  const body = t.body.replace(/\{(\w+)\}/g, (_, k: string) => plain(vars[k] || FALLBACKS[k] || ''));
  return { userId, title: t.title, body, type: t.type, createdBy: null, createdAt: at };
}
