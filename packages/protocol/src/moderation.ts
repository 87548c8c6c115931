import { type Static, Type } from '@sinclair/typebox';
import { IdParam } from './common.js';
import { Limits } from './constants.js';
import { PunishmentSchema } from './users.js';

const strict = { additionalProperties: false } as const;
const Reason = Type.String({ maxLength: Limits.PUNISH_REASON_MAX });
const Duration = Type.Integer({ minimum: Limits.PUNISH_DURATION_MIN_S, maximum: Limits.PUNISH_DURATION_MAX_S });

/** Timeout (spec 4.6): duration required, 60 to 2592000 seconds; reason up to 500. */
export const TimeoutBody = Type.Object({ user_id: IdParam, duration: Duration, reason: Type.Optional(Reason) }, strict);
/** Ban and mute: permanent unless a duration is given. */
export const PunishBody = Type.Object(
  { user_id: IdParam, duration: Type.Optional(Duration), reason: Type.Optional(Reason) },
  strict,
);
export const ReasonBody = Type.Object({ user_id: IdParam, reason: Type.Optional(Reason) }, strict);
export const TargetBody = Type.Object({ user_id: IdParam }, strict);

export const PunishResponse = Type.Object({ ok: Type.Boolean(), punishment: Type.Optional(PunishmentSchema) });

export type TimeoutBody = Static<typeof TimeoutBody>;
export type PunishBody = Static<typeof PunishBody>;
export type ReasonBody = Static<typeof ReasonBody>;
