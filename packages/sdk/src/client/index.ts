/** The typed Parlor client: REST, Socket.IO, and the E2E chat session built on both. */
export { BotClient, type BotClientOptions, ParlorClient, type ParlorClientOptions } from './api.js';
export { ChatKeyStore, type EpochKey } from './e2e-keys.js';
export { E2EChatSession } from './e2e-session.js';
export { splitShare } from './e2e-share.js';
export {
  type ChatEntry,
  type E2EChatSessionEvents,
  type E2EChatSessionOptions,
  E2ESessionError,
  E2ESessionErrorCode,
  type JoinedChat,
  type JoinOptions,
} from './e2e-types.js';
export { AsyncQueue, TypedEmitter } from './emitter.js';
export { ClientErrorCode, isApiError, ParlorApiError, type ParlorErrorSource } from './errors.js';
export { HttpClient, type HttpClientOptions, parseSetCookie, type Query, SESSION_COOKIE } from './http.js';
export { type BadServerEventDetails, onChecked, ServerEventSchemas, shapeProblem } from './server-events.js';
export {
  type ConnectOptions,
  connect,
  emitAck,
  joinRoom,
  type KeepConnectedOptions,
  keepConnected,
  leaveRoom,
  type ParlorSocket,
  type RoomJoined,
  TERMINAL_CONNECT_CODES,
} from './socket.js';
export type * from './types.js';
export {
  RoomVm,
  RoomVmError,
  RoomVmErrorCode,
  type RoomVmEvents,
  type RoomVmOptions,
  type VmFrame,
  type VmInput,
  type VmWatching,
} from './vm.js';
