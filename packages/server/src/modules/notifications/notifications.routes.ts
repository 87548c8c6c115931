import {
  AdminNotificationBody,
  AdminNotificationCreated,
  AdminNotificationDeleted,
  AdminNotificationParams,
  EmptyBody,
  MarkedResponse,
  NotificationIdParams,
  NotificationSchema,
  NotificationsPage,
  NotificationsQuery,
  UnreadCountResponse,
} from '@parlor/protocol';
import { currentUser, type Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import { adminActor } from '../admin/admin.routes.js';
import type { NotificationsService } from './notifications.service.js';

const tags = ['notifications'];

/** Spec 4.7: the signed-in user's own notifications. */
export function registerNotificationsRoutes(
  app: App,
  deps: { notifications: NotificationsService; guards: Guards },
): void {
  const { notifications, guards } = deps;
  const auth = { tags, security: security.session };

  app.get('/v1/notifications', {
    schema: {
      ...auth,
      description: 'Newest first. `before` is a notification id: pass `next_before` to get the next page.',
      querystring: NotificationsQuery,
      response: { 200: NotificationsPage, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => notifications.list(currentUser(req).id, req.query.before, req.query.limit),
  });

  app.get('/v1/notifications/unread', {
    schema: { ...auth, response: { 200: UnreadCountResponse, ...errorResponses } },
    onRequest: guards.session,
    handler: async (req) => notifications.unread(currentUser(req).id),
  });

  app.post('/v1/notifications/read-all', {
    schema: {
      ...auth,
      description: 'Marks every unread notification read; `marked` counts them (0 is valid).',
      body: EmptyBody,
      response: { 200: MarkedResponse, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => notifications.readAll(currentUser(req).id),
  });

  app.post('/v1/notifications/:notification_id/read', {
    schema: {
      ...auth,
      description: 'Unread → read; answers the updated notification.',
      params: NotificationIdParams,
      body: EmptyBody,
      response: { 200: NotificationSchema, ...errorResponses },
    },
    onRequest: guards.session,
    handler: async (req) => notifications.read(currentUser(req).id, req.params.notification_id),
  });
}

/** Spec 4.8: admin notifications, targeted or broadcast (the operator token or Admin and above). */
export function registerAdminNotificationsRoutes(
  app: App,
  deps: { notifications: NotificationsService; guards: Guards },
): void {
  const { notifications, guards } = deps;
  const admin = { tags: ['admin'], security: security.operator };

  app.post('/v1/admin/notifications', {
    schema: {
      ...admin,
      description: 'With `user_id`: to that user. Without: a broadcast, one copy per registered user.',
      body: AdminNotificationBody,
      response: { 200: AdminNotificationCreated, ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return notifications.send(actor, level, req.body);
    },
  });

  app.post('/v1/admin/notifications/:id/delete', {
    schema: {
      ...admin,
      description: 'Deletes a notification; a copy of a broadcast deletes the whole broadcast.',
      params: AdminNotificationParams,
      body: EmptyBody,
      response: { 200: AdminNotificationDeleted, ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return notifications.remove(actor, level, req.params.id);
    },
  });
}
