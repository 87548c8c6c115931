import type {
  ActivityAnswer,
  ChatAnswer,
  ChatConfigInput,
  ChatKeyAnswer,
  ChatsAnswer,
  CreateChatInput,
  CreateInviteInput,
  DeletedAnswer,
  HistoryInput,
  InviteAnswer,
  InvitesAnswer,
  MessagesAnswer,
  OkAnswer,
  PageInput,
  RegisterKeyAnswer,
  SendMessageAnswer,
  ShareKeysAnswer,
  ShareKeysBody,
} from '../types.js';
import { chatPath } from './base.js';
import { BotGuildRoutes } from './bots-guilds.js';

/** ParlorClient's chat routes: chats, invites, the room VM, keys and messages. */
export abstract class ChatRoutes extends BotGuildRoutes {
  // Chats

  /** `POST /v1/portal/chats/create` → `{chat}` (needs a chat slot: spec 2.11). */
  createChat(input: CreateChatInput): Promise<ChatAnswer> {
    return this.post('/v1/portal/chats/create', input);
  }

  /** `GET /v1/portal/chats` → `{chats}` you are a member of. */
  listChats(): Promise<ChatsAnswer> {
    return this.get('/v1/portal/chats');
  }

  /** `GET /v1/portal/chats/{chat_id}` → `{chat}`. */
  getChat(chatId: number): Promise<ChatAnswer> {
    return this.get(chatPath(chatId));
  }

  /** `POST /v1/portal/chats/{chat_id}/config/update` → `{chat}` (owner or Admin). */
  updateChatConfig(chatId: number, input: ChatConfigInput): Promise<ChatAnswer> {
    return this.post(`${chatPath(chatId)}/config/update`, input);
  }

  /** `POST /v1/portal/chats/{chat_id}/delete` → `{ok}` (owner or Admin). */
  deleteChat(chatId: number): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/delete`);
  }

  /** `POST /v1/portal/chats/{chat_id}/invites/create` → `{invite}`. */
  createInvite(chatId: number, input: CreateInviteInput = {}): Promise<InviteAnswer> {
    return this.post(`${chatPath(chatId)}/invites/create`, input);
  }

  /** `GET /v1/portal/chats/{chat_id}/invites` → `{invites}` (live ones; owner or Admin). */
  listInvites(chatId: number): Promise<InvitesAnswer> {
    return this.get(`${chatPath(chatId)}/invites`);
  }

  /** `POST /v1/portal/chats/{chat_id}/invites/{code}/delete` → `{ok}`. */
  deleteInvite(chatId: number, code: string): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/invites/${encodeURIComponent(code)}/delete`);
  }

  /** `GET /v1/portal/chats/{chat_id}/activity` → `{activity}`, newest first. */
  activity(chatId: number, page: PageInput = {}): Promise<ActivityAnswer> {
    return this.get(`${chatPath(chatId)}/activity`, { ...page });
  }

  // Room VM (docs/api.md "Room VM"; the socket side is RoomVm in vm.ts)

  /** `POST /v1/portal/chats/{chat_id}/start` → `{ok}`: starts the chat's shared browser (running: at once). */
  startRoom(chatId: number): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/start`, {});
  }

  /** `POST /v1/portal/chats/{chat_id}/stop` → `{ok}`: stops it (stopped already: `{ok}` too). */
  stopRoom(chatId: number): Promise<OkAnswer> {
    return this.post(`${chatPath(chatId)}/stop`, {});
  }

  // Keys (DESIGN.md 7)

  /** `POST /v1/portal/keys`: registers this session's X25519 public key (base64). */
  registerKey(publicKey: string): Promise<RegisterKeyAnswer> {
    return this.post('/v1/portal/keys', { public_key: publicKey });
  }

  /** `GET /v1/portal/chats/{chat_id}/keys` → `{epoch, envelope, key_ring}`. */
  chatKey(chatId: number): Promise<ChatKeyAnswer> {
    return this.get(`${chatPath(chatId)}/keys`);
  }

  /** `POST /v1/portal/chats/{chat_id}/keys/share` → `{epoch, stored}`. */
  shareKeys(chatId: number, body: ShareKeysBody): Promise<ShareKeysAnswer> {
    return this.post(`${chatPath(chatId)}/keys/share`, body);
  }

  // Messages

  /** `POST /v1/portal/chats/{chat_id}/messages`: `content` is a ciphertext bundle → `{id}`. */
  sendMessage(chatId: number, content: string): Promise<SendMessageAnswer> {
    return this.post(`${chatPath(chatId)}/messages`, { content });
  }

  /** `GET /v1/portal/chats/{chat_id}/messages` → `{messages}`, newest first. */
  history(chatId: number, input: HistoryInput = {}): Promise<MessagesAnswer> {
    return this.get(`${chatPath(chatId)}/messages`, { ...input });
  }

  /** `POST …/messages/delete {ids}` → `{deleted, deleted_ids}`. */
  deleteMessages(chatId: number, ids: string[]): Promise<DeletedAnswer> {
    return this.post(`${chatPath(chatId)}/messages/delete`, { ids });
  }

  /** `POST …/messages/delete-mine` → `{deleted, deleted_ids}`. */
  deleteMine(chatId: number): Promise<DeletedAnswer> {
    return this.post(`${chatPath(chatId)}/messages/delete-mine`);
  }

  /** `POST …/messages/delete-last {count}` → `{deleted, deleted_ids}` (owner, Moderators and above). */
  deleteLast(chatId: number, count: number): Promise<DeletedAnswer> {
    return this.post(`${chatPath(chatId)}/messages/delete-last`, { count });
  }
}
