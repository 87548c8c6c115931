import { SubscriptionChangeResponse, SubscriptionGrantBody, SubscriptionRevokeBody } from '@parlor/protocol';
import type { Guards } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import { adminActor } from '../admin/admin.routes.js';
import type { SubscriptionsService } from './subscriptions.service.js';

/** Spec 4.8: subscription grant and revoke (the operator token or Admin and above, level rules apply). */
export function registerSubscriptionsRoutes(
  app: App,
  deps: { subscriptions: SubscriptionsService; guards: Guards },
): void {
  const { subscriptions, guards } = deps;
  const admin = { tags: ['admin'], security: security.operator };

  app.post('/v1/admin/subscriptions/grant', {
    schema: {
      ...admin,
      description:
        'TRIAL: 7 days, once per user ever (409 ERR_TRIAL_ALREADY_USED). PREMIUM: `duration_days` (1-3650) from now, required. LIFETIME: no expiry. Replaces the current subscription.',
      body: SubscriptionGrantBody,
      response: { 200: SubscriptionChangeResponse, ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return subscriptions.grant(actor, level, req.body);
    },
  });

  app.post('/v1/admin/subscriptions/revoke', {
    schema: {
      ...admin,
      description: 'Back to Basic; a Basic user is left as is.',
      body: SubscriptionRevokeBody,
      response: { 200: SubscriptionChangeResponse, ...errorResponses },
    },
    onRequest: guards.operatorOrAdmin,
    handler: async (req) => {
      const { actor, level } = adminActor(req);
      return subscriptions.revoke(actor, level, req.body);
    },
  });
}
