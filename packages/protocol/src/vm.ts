import { type Static, Type } from '@sinclair/typebox';
import { IdParam, Timestamp } from './common.js';
import { Limits } from './constants.js';
import type { Ack } from './events.js';

/**
 * Room VM (shared browser) events, DESIGN.md section 6: start/stop over HTTP, then `room:started`
 * with viewer credentials, `vm:watch`, `vm:frame` + `vm:frame:ack`, control hand-over and the
 * controller's `vm:input`. docs/api.md "Room VM" is the prose version of this file.
 */

const strict = { additionalProperties: false } as const;

/** Viewer tokens live this long; a member asks for fresh ones with `vm:credentials`. */
export const VM_TOKEN_TTL_MS = 10 * 60 * 1000;
/** The frame size (CSS pixels) of a room browser; input coordinates are in these pixels. */
export const VM_VIEWPORT = { width: 1280, height: 720 } as const;

export const VmCredentialsSchema = Type.Object({
  token: Type.String({ description: 'short-lived viewer token for vm:watch (this user, this chat)' }),
  expires_at: Timestamp,
});
export type VmCredentials = Static<typeof VmCredentialsSchema>;

/** Why a room VM stopped (`room:stopped`). */
export const VmStopReasons = ['stopped', 'idle', 'crashed', 'shutdown', 'deleted'] as const;
export type VmStopReason = (typeof VmStopReasons)[number];

const Pixel = Type.Integer({ minimum: 0, maximum: 10_000 });
const Delta = Type.Number({ minimum: -100_000, maximum: 100_000 });

export const VmChatPayload = Type.Object({ chat_id: IdParam }, strict);
export const VmWatchPayload = Type.Object(
  { chat_id: IdParam, token: Type.String({ minLength: 1, maxLength: 512 }) },
  strict,
);
export const VmFrameAckPayload = Type.Object(
  { chat_id: IdParam, seq: Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER }) },
  strict,
);
export const VmControlGrantPayload = Type.Object({ chat_id: IdParam, user_id: IdParam }, strict);

/**
 * Whether `value` is an absolute http(s) URL with a host as a browser reads it (the WHATWG URL
 * parser): what a room browser can open. A pattern cannot tell `http://[` or `http://%zz/` from a
 * URL; this can. Room start URLs and `navigate` URLs are checked with it.
 */
export function isHttpUrl(value: string): boolean {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    return false;
  }
  return (url.protocol === 'http:' || url.protocol === 'https:') && url.hostname !== '';
}

/**
 * An http(s) URL for `navigate` (other schemes would reach the browser host's files or internals).
 * The server validates the `http-url` format with isHttpUrl: text that passes the pattern but is
 * no URL is refused (ERR_VALIDATION) instead of reaching the browser.
 */
export const VmNavigateUrl = Type.String({
  maxLength: 2000,
  pattern: '^[Hh][Tt][Tt][Pp][Ss]?://[^\\s/?#]+[^\\s]*$',
  format: 'http-url',
});

const oneOf = <T extends string>(...values: T[]) => Type.Union(values.map((v) => Type.Literal(v)));

/**
 * The fields of each kind of controller input (DESIGN.md section 6), without the chat: the socket
 * payloads below add `chat_id`; browser hosts receive the same inputs for a room.
 */
export const VmInputFields = {
  mouse: {
    kind: Type.Literal('mouse'),
    type: oneOf('move', 'down', 'up'),
    x: Pixel,
    y: Pixel,
    button: Type.Optional(oneOf('left', 'middle', 'right')),
  },
  wheel: { kind: Type.Literal('wheel'), x: Pixel, y: Pixel, dx: Delta, dy: Delta },
  key: {
    kind: Type.Literal('key'),
    type: oneOf('down', 'up'),
    key: Type.String({ minLength: 1, maxLength: 32 }),
    code: Type.String({ maxLength: 32 }),
  },
  text: { kind: Type.Literal('text'), text: Type.String({ minLength: 1, maxLength: Limits.VM_INPUT_TEXT_MAX }) },
  navigateUrl: { url: VmNavigateUrl },
  navigateAction: { action: oneOf('back', 'forward', 'reload') },
};

/** The controller's input, DESIGN.md section 6: mouse, wheel, key, text, navigate. */
export const VmInputPayload = Type.Union([
  Type.Object({ chat_id: IdParam, ...VmInputFields.mouse }, strict),
  Type.Object({ chat_id: IdParam, ...VmInputFields.wheel }, strict),
  Type.Object({ chat_id: IdParam, ...VmInputFields.key }, strict),
  Type.Object({ chat_id: IdParam, ...VmInputFields.text }, strict),
  Type.Object({ chat_id: IdParam, kind: Type.Literal('navigate'), ...VmInputFields.navigateUrl }, strict),
  Type.Object({ chat_id: IdParam, kind: Type.Literal('navigate'), ...VmInputFields.navigateAction }, strict),
]);
export type VmInputPayload = Static<typeof VmInputPayload>;

export interface VmFrameEvent {
  chat_id: number;
  /** Increases with every frame of the room; acknowledge it with `vm:frame:ack`. */
  seq: number;
  mime: 'image/jpeg';
  /** The encoded image (binary). */
  data: Uint8Array;
}

/** Server → client events of the room VM. */
export interface VmServerToClientEvents {
  'room:started': (e: { chat_id: number; credentials: VmCredentials }) => void;
  'room:stopped': (e: { chat_id: number; reason: VmStopReason }) => void;
  'vm:frame': (e: VmFrameEvent) => void;
  'vm:control': (e: { chat_id: number; controller_user_id: number | null }) => void;
  /** A member asked for control while someone else holds it (for the chat owner and moderators). */
  'vm:control:request': (e: { chat_id: number; user_id: number; username: string }) => void;
}

/**
 * Client → server events of the room VM; each takes an ack callback, except that `vm:frame:ack`
 * may be sent without one (the SDK does: an answer to every frame's acknowledgement would double
 * the packets per frame, and a refused one changes nothing for the viewer).
 */
export interface VmClientToServerEvents {
  'vm:credentials': (p: { chat_id: number }, ack: (a: Ack<{ credentials: VmCredentials }>) => void) => void;
  'vm:watch': (
    p: { chat_id: number; token: string },
    ack: (a: Ack<{ width: number; height: number; controller_user_id: number | null }>) => void,
  ) => void;
  'vm:unwatch': (p: { chat_id: number }, ack: (a: Ack) => void) => void;
  'vm:frame:ack': (p: { chat_id: number; seq: number }, ack?: (a: Ack) => void) => void;
  'vm:control:request': (
    p: { chat_id: number },
    ack: (a: Ack<{ granted: boolean; controller_user_id: number | null }>) => void,
  ) => void;
  'vm:control:grant': (p: { chat_id: number; user_id: number }, ack: (a: Ack) => void) => void;
  'vm:control:release': (p: { chat_id: number }, ack: (a: Ack) => void) => void;
  'vm:input': (p: VmInputPayload, ack: (a: Ack) => void) => void;
}
