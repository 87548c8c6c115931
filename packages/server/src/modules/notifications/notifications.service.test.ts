import type { Notification } from '@parlor/protocol';
import { describe, expect, it } from 'vitest';
import { FakeClock } from '../../platform/clock.js';
import type { Db } from '../../platform/db/index.js';
import { AppError } from '../../platform/errors.js';
import type { AuditStore } from '../audit/audit.store.js';
import type { NotificationEvents } from './notifications.events.js';
import { linkTargets } from './notifications.richtext.js';
import { formatMoment, makeNotificationsService, plain } from './notifications.service.js';
import type { NotificationInsert, NotificationRow, NotificationsStore } from './notifications.store.js';

/** An in-memory store with just what the service's user-facing paths use. */
function memoryStore() {
  const rows: NotificationRow[] = [];
  const store = {
    async insert(v: NotificationInsert) {
      const row: NotificationRow = {
        id: rows.length + 1,
        userId: v.userId,
        title: v.title,
        body: v.body,
        type: v.type,
        readAt: v.readAt ?? null,
        createdBy: v.createdBy ?? null,
        createdAt: v.createdAt,
        broadcastId: v.broadcastId ?? null,
      };
      rows.push(row);
      return row;
    },
    async insertMany(vs: NotificationInsert[]) {
      return Promise.all(vs.map((v) => store.insert(v)));
    },
    async byId(id: number) {
      return rows.find((r) => r.id === id);
    },
    async page(userId: number, before: number | undefined, limit: number) {
      return rows
        .filter((r) => r.userId === userId && (before === undefined || r.id < before))
        .sort((a, b) => b.id - a.id)
        .slice(0, limit);
    },
    async markRead(userId: number, id: number, at: Date) {
      const row = rows.find((r) => r.id === id && r.userId === userId && r.readAt === null);
      if (row) row.readAt = at;
      return row;
    },
  };
  return { rows, store: store as unknown as NotificationsStore };
}

function setup() {
  const clock = new FakeClock(Date.UTC(2026, 0, 1, 12, 30));
  const { rows, store } = memoryStore();
  const emitted: { userId: number; n: Notification }[] = [];
  const events: NotificationEvents = {
    toUser: (userId, n) => emitted.push({ userId, n }),
    onlineUserIds: async () => [],
  };
  const service = makeNotificationsService({
    db: {} as Db,
    store,
    clock,
    events,
    audit: {} as AuditStore,
    users: { byId: async () => undefined },
    log: { error: () => {} },
  });
  return { clock, rows, service, emitted };
}

const code = async (p: Promise<unknown>) => {
  try {
    await p;
  } catch (e) {
    if (e instanceof AppError) return e.code;
    throw e;
  }
  return 'no error';
};

describe('automated notifications', () => {
  it('escapes the values put into a body, so a username cannot add a link or bold text', async () => {
    const { service } = setup();
    const hostile = '**x** [click](javascript:alert(1)) <b>_`\\';
    const row = await service.automated(7, 'welcome', { username: hostile });
    expect(row.body).toBe(`Welcome, **${plain(hostile)}**! Set your username and avatar in your profile.`);
    expect(row.body).toContain('\\[click\\]\\(javascript:alert\\(1\\)\\)');
    expect(linkTargets(row.body)).toEqual([]);
    expect(row).toMatchObject({ userId: 7, type: 'success', title: 'Welcome to Parlor', createdBy: null });
  });

  it('writes the subscription templates with their values', async () => {
    const { service } = setup();
    const until = formatMoment(new Date(Date.UTC(2026, 0, 8, 12, 30)));
    expect(until).toBe('2026-01-08 12:30 UTC');
    const rows = await service.automatedMany([
      { userId: 1, kind: 'trial_started', vars: { until } },
      { userId: 2, kind: 'subscription_upgraded', vars: { tier: 'Lifetime', until: 'with no expiry' } },
      { userId: 3, kind: 'subscription_revoked', vars: { tier: 'Premium' } },
      { userId: 4, kind: 'subscription_expired', vars: { tier: 'Trial', until } },
    ]);
    expect(rows.map((r) => [r.userId, r.title, r.body])).toEqual([
      [1, 'Trial started', `Your **Premium trial** is active until **${until}**. Enjoy creating your own chat!`],
      [2, 'Subscription upgraded', 'Your subscription is now **Lifetime**, with no expiry.'],
      [3, 'Subscription revoked', 'Your **Premium** subscription was revoked. Your account is now Basic.'],
      [4, 'Subscription expired', `Your **Trial** subscription ended on **${until}**. Your account is now Basic.`],
    ]);
  });

  it('writes the moderation templates; an empty reason reads "none given"', async () => {
    const { service } = setup();
    const banned = await service.automated(1, 'banned', { duration: 'permanently', reason: '' });
    expect(banned).toMatchObject({ type: 'danger', title: 'Account banned' });
    expect(banned.body).toBe('Your account was **banned**. Duration: **permanently**. Reason: none given');
    const warned = await service.automated(1, 'warned', { reason: 'spam [link](javascript:x)' });
    expect(warned.body).toBe('A moderator gave you a **warning**. Reason: spam \\[link\\]\\(javascript:x\\)');
    expect(linkTargets(warned.body)).toEqual([]);
  });

  it('publishes each row to its recipient as the spec 2.7 object, nothing more', async () => {
    const { service, emitted } = setup();
    const a = await service.automated(3, 'permission_changed', { level: 'Admin' });
    const b = await service.automated(4, 'new_ip_login', { ip: '203.0.113.9' });
    expect(emitted).toEqual([]);
    service.publish([a, b]);
    expect(emitted.map((e) => e.userId)).toEqual([3, 4]);
    expect(emitted[0]?.n).toEqual({
      id: a.id,
      title: 'Permission changed',
      body: 'Your permission level is now **Admin**.',
      type: 'info',
      read_at: null,
      created_at: '2026-01-01T12:30:00.000Z',
      created_by: null,
    });
  });
});

describe('the list and read rules', () => {
  it('pages newest first and gives next_before only when more remain', async () => {
    const { service } = setup();
    for (let i = 0; i < 5; i++) await service.automated(1, 'welcome', { username: `u${i}` });
    await service.automated(2, 'welcome', { username: 'other' });
    const first = await service.list(1, undefined, 2);
    expect(first.notifications.map((n) => n.id)).toEqual([5, 4]);
    expect(first.next_before).toBe(4);
    const second = await service.list(1, 4, 2);
    expect(second.notifications.map((n) => n.id)).toEqual([3, 2]);
    const last = await service.list(1, 2, 2);
    expect(last).toMatchObject({ next_before: null });
    expect(last.notifications.map((n) => n.id)).toEqual([1]);
    expect((await service.list(1, undefined, 5)).next_before).toBeNull();
  });

  it('reads once (read_at from the clock), then 409; someone else’s or a missing one is 404', async () => {
    const { service, clock } = setup();
    const mine = await service.automated(1, 'welcome', { username: 'me' });
    const theirs = await service.automated(2, 'welcome', { username: 'them' });
    clock.advance(60_000);
    const read = await service.read(1, mine.id);
    expect(read.read_at).toBe('2026-01-01T12:31:00.000Z');
    expect(await code(service.read(1, mine.id))).toBe('ERR_NOTIFICATION_ALREADY_READ');
    expect(await code(service.read(1, theirs.id))).toBe('ERR_NOTIFICATION_NOT_FOUND');
    expect(await code(service.read(1, 999))).toBe('ERR_NOTIFICATION_NOT_FOUND');
  });
});
