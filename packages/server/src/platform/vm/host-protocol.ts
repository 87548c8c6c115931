import { type ErrorCode, ErrorCodes, StartUrl, VmInputFields } from '@parlor/protocol';
import { Type } from '@sinclair/typebox';
import { AppError, appError } from '../errors.js';
import type { VmInfo, VmInput, VmNavigation, VmProviderStop, VmStartSpec } from './provider.js';

/**
 * What a Parlor node and a browser host say to each other (browser-host.ts serves it,
 * remote-provider.ts speaks it): the VM provider port, over one Socket.IO connection per node.
 * The node authenticates with the shared token (VM_HOST_TOKEN) in the handshake's `auth`.
 *
 * Node → host, each with an ack `{ok: true, …}` or `{ok: false, code, message}` (an AppError code):
 *   host:start {roomId, spec} → {info}     host:stop {roomId}      host:rooms → {rooms}
 *   host:input {roomId, input}              host:navigate {roomId, nav}
 *   host:release {roomId}                   (control changed hands: let go of held keys and buttons)
 *   host:subscribe {roomId}                 host:unsubscribe {roomId}
 * Host → node:
 *   host:frame {roomId, seq, mime, data, width, height}   (volatile: a busy link skips frames)
 *   host:stopped {roomId, reason}                         (a room the host ended by itself)
 *
 * Rooms belong to the connection that started them: when it drops, the host stops them, as a
 * node's own browsers end when the node exits. A start spec's `allowPrivateNetworks` is the node's
 * wish: the host grants it only when its own VM_ALLOW_PRIVATE_NETWORKS is on too.
 */

/** VmInfo on the wire (a date as ISO text). */
export interface WireInfo extends Omit<VmInfo, 'startedAt'> {
  startedAt: string;
}

export type HostAck<T extends object = object> = ({ ok: true } & T) | { ok: false; code: string; message: string };

export interface HostFrame {
  roomId: string;
  seq: number;
  mime: 'image/jpeg';
  data: Buffer;
  width: number;
  height: number;
}

export interface NodeToHostEvents {
  'host:start': (p: { roomId: string; spec: VmStartSpec }, ack: (a: HostAck<{ info: WireInfo }>) => void) => void;
  'host:stop': (p: { roomId: string }, ack: (a: HostAck) => void) => void;
  'host:rooms': (p: object, ack: (a: HostAck<{ rooms: WireInfo[] }>) => void) => void;
  'host:input': (p: { roomId: string; input: VmInput }, ack: (a: HostAck) => void) => void;
  'host:navigate': (p: { roomId: string; nav: VmNavigation }, ack: (a: HostAck) => void) => void;
  'host:release': (p: { roomId: string }, ack: (a: HostAck) => void) => void;
  'host:subscribe': (p: { roomId: string }, ack: (a: HostAck) => void) => void;
  'host:unsubscribe': (p: { roomId: string }, ack: (a: HostAck) => void) => void;
}

export interface HostToNodeEvents {
  'host:frame': (f: HostFrame) => void;
  'host:stopped': (e: { roomId: string; reason: VmProviderStop }) => void;
}

/*
 * The host checks every node payload against these (a node holds the token, but a host drives
 * browsers: a bad spec or input is refused with ERR_VALIDATION, never handed to Chromium).
 */
const strict = { additionalProperties: false } as const;
const RoomId = Type.String({ minLength: 1, maxLength: 64 });
const oneOf = <T extends string>(...values: T[]) => Type.Union(values.map((v) => Type.Literal(v)));

const StartSpec = Type.Object(
  {
    browser: oneOf('brave', 'tor'),
    proxy: oneOf('us', 'eu', 'none'),
    startUrl: Type.Union([Type.Literal('about:blank'), StartUrl]),
    allowPrivateNetworks: Type.Boolean(),
    width: Type.Integer({ minimum: 16, maximum: 4096 }),
    height: Type.Integer({ minimum: 16, maximum: 4096 }),
  },
  strict,
);

/** What a room's controller may send (the socket payload's fields, without the chat). */
const Input = Type.Union([
  Type.Object(VmInputFields.mouse, strict),
  Type.Object(VmInputFields.wheel, strict),
  Type.Object(VmInputFields.key, strict),
  Type.Object(VmInputFields.text, strict),
]);
const Navigation = Type.Union([
  Type.Object(VmInputFields.navigateUrl, strict),
  Type.Object(VmInputFields.navigateAction, strict),
]);

/** The payload schema of each node → host event. */
export const HostPayloads = {
  'host:start': Type.Object({ roomId: RoomId, spec: StartSpec }, strict),
  'host:stop': Type.Object({ roomId: RoomId }, strict),
  'host:rooms': Type.Object({}, strict),
  'host:input': Type.Object({ roomId: RoomId, input: Input }, strict),
  'host:navigate': Type.Object({ roomId: RoomId, nav: Navigation }, strict),
  'host:release': Type.Object({ roomId: RoomId }, strict),
  'host:subscribe': Type.Object({ roomId: RoomId }, strict),
  'host:unsubscribe': Type.Object({ roomId: RoomId }, strict),
} satisfies Record<keyof NodeToHostEvents, object>;

/** What the node accepts as a frame from a host (the rest of the event is the host's word). */
export function isHostFrame(f: unknown): f is HostFrame {
  const x = f as Partial<HostFrame> | null;
  return (
    typeof x === 'object' &&
    x !== null &&
    typeof x.roomId === 'string' &&
    Number.isSafeInteger(x.seq) &&
    x.mime === 'image/jpeg' &&
    x.data instanceof Uint8Array &&
    Number.isInteger(x.width) &&
    Number.isInteger(x.height)
  );
}

/** A host's start answer that names this room, running, with a size and a start date. */
export function isStartedInfo(info: unknown, roomId: string): info is WireInfo {
  const x = info as Partial<WireInfo> | null;
  return (
    typeof x === 'object' &&
    x !== null &&
    x.roomId === roomId &&
    (x.state === 'starting' || x.state === 'running') &&
    Number.isInteger(x.width) &&
    Number.isInteger(x.height) &&
    typeof x.startedAt === 'string' &&
    !Number.isNaN(Date.parse(x.startedAt)) &&
    Number.isInteger(x.restarts)
  );
}

export const toWire = (info: VmInfo): WireInfo => ({ ...info, startedAt: info.startedAt.toISOString() });
export const fromWire = (info: WireInfo): VmInfo => ({ ...info, startedAt: new Date(info.startedAt) });

/** A failure as an ack: AppErrors keep their code and message; anything else is ERR_INTERNAL. */
export function errorAck(err: unknown): { ok: false; code: string; message: string } {
  if (err instanceof AppError) return { ok: false, code: err.code, message: err.message };
  return { ok: false, code: 'ERR_INTERNAL', message: ErrorCodes.ERR_INTERNAL.message };
}

/** The AppError an error ack stands for (an unknown code becomes ERR_INTERNAL). */
export function ackError(a: { code: string; message: string }): AppError {
  const code = (a.code in ErrorCodes ? a.code : 'ERR_INTERNAL') as ErrorCode;
  return appError(code, a.message);
}
