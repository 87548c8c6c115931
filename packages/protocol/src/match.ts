import { type Static, Type } from '@sinclair/typebox';
import { IdParam, Nullable, Timestamp } from './common.js';

const strict = { additionalProperties: false } as const;

/**
 * Tags are checked by the service, so any tag that fails (not a string, too long, too many) answers
 * ERR_MATCH_UNSUPPORTED_INTEREST (spec 7); the body limit bounds the array.
 */
export const MatchBody = Type.Object({ interests: Type.Array(Type.Unknown()) }, strict);

/** Spec 2.8: idle; searching with interests and the queue deadline; matched with token and chat expiry. */
export const MatchStatusSchema = Type.Object({
  state: Type.Union([Type.Literal('idle'), Type.Literal('searching'), Type.Literal('matched')]),
  interests: Type.Optional(Type.Array(Type.String())),
  token: Type.Optional(Type.String()),
  chat_id: Type.Optional(Type.Integer()),
  expires_at: Type.Optional(Timestamp),
});

export const MatchLeaveBody = Type.Object({ chat_id: Type.Optional(IdParam) }, { ...strict, 'x-empty-body': true });
export const MatchLeaveResponse = Type.Object({ ok: Type.Boolean(), chat_id: Type.Integer() });

export const MatchStatisticsSchema = Type.Object({
  online: Type.Integer(),
  top_tags: Type.Array(Type.Object({ tag: Type.String(), searching: Type.Integer() })),
});

export const PeerSchema = Type.Object({
  id: Type.Integer(),
  username: Type.String(),
  stranger: Type.Boolean(),
  country_code: Nullable(Type.String()),
});

export const StrangerResponse = Type.Object({
  user: Type.Object({ id: Type.Integer(), username: Type.String(), stranger: Type.Literal(true) }),
});

export const UserIdBody = Type.Object({ user_id: IdParam }, strict);
export const BlockSchema = Type.Object({ user_id: Type.Integer(), created_at: Timestamp });

export type MatchStatus = Static<typeof MatchStatusSchema>;
export type Peer = Static<typeof PeerSchema>;
