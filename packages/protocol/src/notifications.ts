import { type Static, Type } from '@sinclair/typebox';
import { IdParam, Nullable, Timestamp } from './common.js';
import { Limits, NotificationTypes } from './constants.js';

const strict = { additionalProperties: false } as const;

const NotificationType = Type.Union(
  NotificationTypes.map((t) => Type.Literal(t)),
  { description: NotificationTypes.join(', ') },
);

/**
 * A notification (spec 2.7). `body` is rich text: `**bold**`, `[label](https://…)` and `\` escaping
 * the next character; everything else is literal (never HTML). docs/api.md has the grammar.
 */
export const NotificationSchema = Type.Object(
  {
    id: Type.Integer({ minimum: 1 }),
    title: Type.String(),
    body: Type.String({ description: 'rich text: **bold**, [label](https://…), \\ escapes' }),
    type: NotificationType,
    read_at: Nullable(Timestamp),
    created_at: Timestamp,
    created_by: Nullable(Type.Integer({ description: 'the admin’s user id; null for automated and operator ones' })),
  },
  { $id: 'Notification' },
);

/** GET /v1/notifications: newest first; `before` is the cursor (a notification id). */
export const NotificationsQuery = Type.Object(
  {
    before: Type.Optional(IdParam),
    limit: Type.Integer({
      minimum: 1,
      maximum: Limits.NOTIFICATIONS_PAGE_MAX,
      default: Limits.NOTIFICATIONS_PAGE_DEFAULT,
    }),
  },
  strict,
);
export const NotificationsPage = Type.Object({
  notifications: Type.Array(NotificationSchema),
  next_before: Nullable(Type.Integer({ description: 'pass as `before` for the next page; null on the last page' })),
});
export const UnreadCountResponse = Type.Object({ unread: Type.Integer({ minimum: 0 }) });
export const MarkedResponse = Type.Object({ marked: Type.Integer({ minimum: 0 }) });
export const NotificationIdParams = Type.Object({ notification_id: IdParam }, strict);

/** Line breaks (Unicode's and JavaScript's line terminators): CR, LF, VT, FF, NEL, LS, PS. */
const LINE_BREAK = /[\r\n\v\f\u0085\u2028\u2029]/;
/** A character that shows: neither white space nor a format character (Unicode Cf, such as U+200B). */
const VISIBLE = /[^\s\p{Cf}]/u;

/**
 * Whether text has something visible in it: the `visible` string format, which the server checks
 * (platform/validation.ts) as it checks `http-url` with isHttpUrl.
 */
export function isVisible(value: string): boolean {
  return VISIBLE.test(value);
}

/** Whether text is one line with something visible in it: the `one-line` string format (as `visible`). */
export function isOneLine(value: string): boolean {
  return !LINE_BREAK.test(value) && isVisible(value);
}

/** One line of 1-100 characters (code points), not all white space or format characters. */
export const NotificationTitle = Type.String({
  minLength: 1,
  maxLength: Limits.NOTIFICATION_TITLE_MAX,
  pattern: '^[^\\r\\n\\v\\f\\u0085\\u2028\\u2029]+$',
  format: 'one-line',
});
/**
 * Rich text, 1-2000 characters, line breaks allowed, not all white space or format characters, as
 * a title (a blank notification tells nothing; docs/api.md); links must be http or https (checked
 * by the server).
 */
export const NotificationBody = Type.String({
  minLength: 1,
  maxLength: Limits.NOTIFICATION_BODY_MAX,
  pattern: '\\S',
  format: 'visible',
});

/** POST /v1/admin/notifications: with `user_id` to one user, without it to every user. */
export const AdminNotificationBody = Type.Object(
  { title: NotificationTitle, body: NotificationBody, type: NotificationType, user_id: Type.Optional(IdParam) },
  strict,
);
export const AdminNotificationCreated = Type.Object({
  id: Nullable(
    Type.Integer({
      description:
        'the notification (targeted) or one notification of the broadcast (for delete); null if nobody got it',
    }),
  ),
  broadcast_id: Nullable(Type.String({ description: 'the broadcast this belongs to; null when targeted' })),
  recipients: Type.Integer({ minimum: 0 }),
});
export const AdminNotificationParams = Type.Object({ id: IdParam }, strict);
export const AdminNotificationDeleted = Type.Object({
  deleted: Type.Integer({ minimum: 1, description: 'rows removed: 1, or every copy of a broadcast' }),
  broadcast_id: Nullable(Type.String()),
});

export type Notification = Static<typeof NotificationSchema>;
export type NotificationsQuery = Static<typeof NotificationsQuery>;
export type NotificationsPage = Static<typeof NotificationsPage>;
export type AdminNotificationBody = Static<typeof AdminNotificationBody>;
export type AdminNotificationCreated = Static<typeof AdminNotificationCreated>;
export type AdminNotificationDeleted = Static<typeof AdminNotificationDeleted>;
