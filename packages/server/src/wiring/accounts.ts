import { makeAuditStore } from '../modules/audit/audit.store.js';
import { makeCodeStore } from '../modules/auth/auth.codes.js';
import { makeAuthService } from '../modules/auth/auth.service.js';
import { makeBotsService } from '../modules/bots/bots.service.js';
import { makeBotsStore } from '../modules/bots/bots.store.js';
import { realtimeNotificationEvents } from '../modules/notifications/notifications.events.js';
import { makeNotificationsService } from '../modules/notifications/notifications.service.js';
import { makeNotificationsStore } from '../modules/notifications/notifications.store.js';
import { makeAuthCache } from '../modules/sessions/sessions.cache.js';
import { makeSessionsService } from '../modules/sessions/sessions.service.js';
import { makeSessionsStore } from '../modules/sessions/sessions.store.js';
import { makeSubscriptionsService } from '../modules/subscriptions/subscriptions.service.js';
import { makeSubscriptionsStore } from '../modules/subscriptions/subscriptions.store.js';
import { makeSubscriptionSweep } from '../modules/subscriptions/subscriptions.sweep.js';
import { makeProfileCache } from '../modules/users/users.cache.js';
import { type ChangeListener, makeUserChanges } from '../modules/users/users.changes.js';
import { makeUsersService } from '../modules/users/users.service.js';
import { makeUsersStore } from '../modules/users/users.store.js';
import { GeoipLiteLookup } from '../platform/geo.js';
import type { Realtime } from '../platform/realtime.js';
import type { WiringContext } from './services.js';

/**
 * Users and what hangs off an account: the user-change channel and read caches, sessions,
 * notifications, bots, login, subscriptions. The socket server comes later, so notifications
 * take it lazily (`realtime`).
 */
export async function wireAccounts(ctx: WiringContext, realtime: () => Realtime) {
  const { app, config, clock, db, state } = ctx;
  const publicUrl = config.publicUrl;
  // Per-node read caches of sessions and own profiles. Every write to a user, their sessions or
  // linked platforms drops their entries on every node once it commits (users.changes.ts).
  const userChanges = makeUserChanges({
    state,
    onError: (err) => app.log.error({ err }, 'user change not published; other nodes may lag up to the cache TTL'),
  });
  const authCache = makeAuthCache(clock);
  const profileCache = makeProfileCache(clock);
  userChanges.attach(authCache, profileCache);
  await userChanges.start();
  app.addHook('onClose', async () => {
    await userChanges.stop();
  });
  const usersStore = makeUsersStore(db, userChanges.changed);
  const audit = makeAuditStore(db, clock);
  const users = makeUsersService({ store: usersStore, clock, publicUrl, profiles: profileCache });
  const sessionsStore = makeSessionsStore(db, userChanges.changed);
  const sessions = makeSessionsService({
    db,
    store: sessionsStore,
    clock,
    geo: ctx.geo ?? new GeoipLiteLookup(),
    cache: authCache,
  });
  const notificationsStore = makeNotificationsStore(db);
  const notifications = makeNotificationsService({
    db,
    store: notificationsStore,
    clock,
    audit,
    users: usersStore,
    // The socket server is created further down; notifications are only emitted once requests flow.
    events: realtimeNotificationEvents(realtime),
    log: app.log,
  });
  const botsStore = makeBotsStore(db);
  const bots = makeBotsService({ db, store: botsStore, audit, state, clock, users });
  const auth = makeAuthService({
    db,
    clock,
    state,
    codes: makeCodeStore(state, clock),
    users: usersStore,
    sessions,
    notifications,
    present: users.present,
  });
  const subscriptionsStore = makeSubscriptionsStore(userChanges.changed);
  const subscriptions = makeSubscriptionsService({
    db,
    clock,
    usersStore,
    users,
    notifications,
    audit,
    expiries: subscriptionsStore,
  });
  const subscriptionSweep = makeSubscriptionSweep({
    db,
    store: subscriptionsStore,
    clock,
    notifications,
  });
  return {
    usersChanged: userChanges.changed,
    /** Feeds another listener from the user-change channel (sessions.sockets.ts). */
    onUsersChanged: (listener: ChangeListener) => userChanges.attach(listener),
    usersStore,
    audit,
    users,
    sessions,
    notifications,
    bots,
    auth,
    subscriptions,
    subscriptionSweep,
    // The stores of the tables the retention sweep trims (wiring/retention.ts).
    stores: { sessions: sessionsStore, notifications: notificationsStore, bots: botsStore },
  };
}

export type Accounts = Awaited<ReturnType<typeof wireAccounts>>;
