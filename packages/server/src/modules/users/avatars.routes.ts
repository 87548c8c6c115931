import { DefaultAvatarKeys } from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { appError } from '../../platform/errors.js';
import type { App } from '../../platform/routing.js';

const COLORS = ['#5865f2', '#757e8a', '#3ba55c', '#faa61a', '#ed4245', '#eb459f'];

/**
 * The six default avatars (avatar_source platform_a_0 … platform_a_5), drawn as small SVGs. They
 * are the `avatar_url` of users who chose one, shown by clients and bots on other sites too, so
 * they may be loaded cross-origin (`Cross-Origin-Resource-Policy: cross-origin`, where the pages'
 * header set says same-site). Static images with no script: nothing to protect from embedding.
 */
export function registerAvatarRoutes(app: App) {
  app.get('/avatars/:key.svg', {
    schema: { hide: true, params: Type.Object({ key: Type.String({ maxLength: 32 }) }) },
    handler: async (req, reply) => {
      const index = DefaultAvatarKeys.indexOf(req.params.key);
      if (index < 0) throw appError('ERR_NOT_FOUND');
      const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="128" height="128" viewBox="0 0 128 128"><circle cx="64" cy="64" r="64" fill="${COLORS[index]}"/><circle cx="64" cy="52" r="22" fill="#fff"/><path d="M26 108c6-22 22-32 38-32s32 10 38 32" fill="#fff"/></svg>`;
      return reply
        .type('image/svg+xml')
        .header('cache-control', 'public, max-age=86400')
        .header('cross-origin-resource-policy', 'cross-origin')
        .send(svg);
    },
  });
}
