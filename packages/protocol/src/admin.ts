import { type Static, Type } from '@sinclair/typebox';

const strict = { additionalProperties: false } as const;

/** POST /v1/admin/users/{user_id}/update. More fields join with the governance work. */
export const AdminUserUpdateBody = Type.Object(
  {
    permission_level: Type.Optional(Type.Integer({ minimum: 0, maximum: 3 })),
    username: Type.Optional(Type.String({ maxLength: 256 })),
  },
  { ...strict, minProperties: 1 },
);
export type AdminUserUpdateBody = Static<typeof AdminUserUpdateBody>;
