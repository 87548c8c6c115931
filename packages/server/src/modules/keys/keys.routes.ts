import {
  ChatIdParams,
  ChatKeyResponse,
  KEY_SHARE_BODY_MAX_BYTES,
  RegisterKeyBody,
  RegisterKeyResponse,
  ShareKeysBody,
  ShareKeysResponse,
} from '@parlor/protocol';
import { type Guards, viewerOf } from '../../platform/auth.js';
import { type App, errorResponses, security } from '../../platform/routing.js';
import { strangerReachHook } from '../chats/chats.routes.js';
import type { ChatsService } from '../chats/chats.service.js';
import { assertOneEnvelopePerSession, type KeysService } from './keys.service.js';

const tags = ['keys'];

export function registerKeysRoutes(app: App, deps: { keys: KeysService; chats: ChatsService; guards: Guards }) {
  const { keys, chats, guards } = deps;
  const strangerReach = strangerReachHook(chats);

  app.post('/v1/portal/keys', {
    schema: {
      tags,
      security: security.session,
      description:
        "Registers this session's X25519 public key (base64 of 32 bytes); answers this session's id (as key rings name it). A key another session registered: 409 ERR_PUBLIC_KEY_IN_USE.",
      body: RegisterKeyBody,
      response: { 200: RegisterKeyResponse, ...errorResponses },
    },
    onRequest: guards.anySession,
    handler: async (req) => {
      const v = viewerOf(req);
      return { status: await keys.register(v.userId, v.sessionId, req.body.public_key), session_id: v.sessionId };
    },
  });

  app.get('/v1/portal/chats/:chat_id/keys', {
    schema: {
      tags,
      security: security.session,
      description: "The current epoch, this session's envelope at it (null until shared) and the key ring.",
      params: ChatIdParams,
      response: { 200: ChatKeyResponse, ...errorResponses },
    },
    onRequest: [guards.anySession, strangerReach],
    handler: async (req) => {
      const v = viewerOf(req);
      await chats.assertMember(v.userId, req.params.chat_id, v.stranger);
      const chat = await chats.get(v, req.params.chat_id);
      return keys.chatKey(chat.id, chat.epoch, v.sessionId);
    },
  });

  app.post('/v1/portal/chats/:chat_id/keys/share', {
    // The largest body the schema admits (500 envelopes of the longest kind, about 147 KB), not the
    // general 64 KiB: keying an epoch sends one envelope per session of the ring, as many per
    // request as the schema allows (protocol KEY_SHARE_BODY_MAX_BYTES has the arithmetic).
    bodyLimit: KEY_SHARE_BODY_MAX_BYTES,
    schema: {
      tags,
      security: security.session,
      description: `Shares the chat key with sessions as envelopes (DESIGN.md 7). Takes bodies up to ${KEY_SHARE_BODY_MAX_BYTES} bytes (the largest its schema admits), not the general 64 KiB.`,
      params: ChatIdParams,
      body: ShareKeysBody,
      response: { 200: ShareKeysResponse, ...errorResponses },
    },
    onRequest: [guards.anySession, strangerReach],
    // After the schema and before anything is read (the membership, the chat, the ring).
    preHandler: async (req) => assertOneEnvelopePerSession(req.body),
    handler: async (req) => {
      const v = viewerOf(req);
      await chats.assertMember(v.userId, req.params.chat_id, v.stranger);
      return keys.share(req.params.chat_id, v.sessionId, req.body);
    },
  });
}
