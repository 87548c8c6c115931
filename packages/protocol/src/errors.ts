/**
 * The one catalogue of error codes. Every non-2xx answer of the service carries one of these
 * codes with its HTTP status; socket acks reuse the same codes. docs/api.md lists every code and a
 * test checks that the list and this catalogue agree.
 */
export const ErrorCodes = {
  ERR_VALIDATION: { status: 400, message: 'The request is not valid.' },
  ERR_INVALID_JSON: { status: 400, message: 'The request body is not valid JSON.' },
  ERR_INVALID_CODE: { status: 400, message: 'The login code is unknown, expired or already used.' },
  ERR_CANNOT_DESTROY_CURRENT_SESSION: {
    status: 400,
    message: 'The current session cannot be destroyed this way; log out instead.',
  },
  ERR_UNSUPPORTED_PLATFORM: { status: 400, message: 'This platform is not supported.' },
  ERR_MATCH_UNSUPPORTED_INTEREST: {
    status: 400,
    message: 'Interests are 1 to 3 tags of 3-12 lower-case letters and digits.',
  },
  ERR_UNAUTHENTICATED: { status: 401, message: 'Authentication is required.' },
  ERR_INVALID_API_KEY: { status: 401, message: 'The API key is missing or not valid.' },
  ERR_FORBIDDEN: { status: 403, message: 'You are not allowed to do this.' },
  ERR_BANNED: { status: 403, message: 'This account is banned.' },
  ERR_TIMED_OUT: { status: 403, message: 'This account is timed out.' },
  ERR_ORIGIN_NOT_ALLOWED: { status: 403, message: 'Requests from this origin are not allowed.' },
  ERR_WEB_LOGIN_REQUIRED: {
    status: 403,
    message: 'Log in through the website once before using bot logins again.',
  },
  ERR_CHAT_CREATE_FORBIDDEN: { status: 403, message: 'Basic accounts cannot create chats; a subscription can.' },
  ERR_CANNOT_BROWSE_PRIVATE: { status: 403, message: 'This chat is private.' },
  ERR_NOT_CHAT_MEMBER: { status: 403, message: 'Join this chat first.' },
  ERR_CHAT_BANNED: { status: 403, message: 'You are banned from this chat.' },
  ERR_MUTED: { status: 403, message: 'You are muted in this chat.' },
  ERR_EPOCH_MISMATCH: { status: 403, message: 'The message was encrypted for another epoch of the chat key.' },
  ERR_NO_ROOM_KEY: { status: 403, message: 'This session has not received the current chat key yet.' },
  ERR_CHAT_READ_ONLY: { status: 403, message: 'This chat is archived and read-only.' },
  ERR_STRANGER_BLOCKED: { status: 403, message: 'This session is blocked from matchmaking.' },
  ERR_VM_TOKEN_INVALID: {
    status: 403,
    message: 'The viewer token is not valid, has expired, or is for another chat or user.',
  },
  ERR_GUILD_PREMIUM_REQUIRED: { status: 403, message: 'This needs the guild to have active premium.' },
  ERR_GUILD_OTHER_BOT: { status: 403, message: 'Another bot reports this guild.' },
  ERR_STRANGER_NOT_ALLOWED: {
    status: 403,
    message: 'Anonymous sessions can only match, chat in their direct chats and manage keys.',
  },
  ERR_NOT_FOUND: { status: 404, message: 'Not found.' },
  ERR_USER_NOT_FOUND: { status: 404, message: 'No such user.' },
  ERR_PLATFORM_IDENTITY_NOT_FOUND: {
    status: 404,
    message: 'No account is linked to this platform identity.',
  },
  ERR_SESSION_NOT_FOUND: { status: 404, message: 'No such session.' },
  ERR_BOT_NOT_FOUND: { status: 404, message: 'No such bot.' },
  ERR_CHAT_NOT_FOUND: { status: 404, message: 'No such chat.' },
  ERR_INVITE_NOT_FOUND: { status: 404, message: 'No such invite, or it expired or was used up.' },
  ERR_NOTIFICATION_NOT_FOUND: { status: 404, message: 'No such notification.' },
  ERR_GUILD_NOT_FOUND: { status: 404, message: 'No such guild.' },
  ERR_NO_DIRECT_CHAT: { status: 404, message: 'You have no active direct chat.' },
  ERR_MATCH_ALREADY_SEARCHING: { status: 409, message: 'You are already searching.' },
  ERR_MATCH_SLOT_LIMIT: { status: 409, message: 'All your direct chat slots are in use.' },
  ERR_MATCH_NO_PEERS_ONLINE: { status: 409, message: 'Nobody else is online right now.' },
  ERR_CHAT_SLOT_LIMIT: { status: 409, message: 'All your chat slots are in use.' },
  ERR_BLOCK_LIMIT: { status: 409, message: 'You have blocked as many users as you can; unblock someone first.' },
  ERR_INVITE_LIMIT: {
    status: 409,
    message: 'This chat has as many live invites as it can hold; delete one first.',
  },
  ERR_EPOCH_ALREADY_KEYED: { status: 409, message: 'This epoch already has a chat key.' },
  ERR_KEY_RING_CHANGED: {
    status: 409,
    message:
      'The key ring changed: the first share of an epoch names every session of the current ring (or, for a ring larger than one request, 500 of them with your own).',
  },
  ERR_NO_SESSION_KEY: { status: 409, message: 'Register this session’s public key first.' },
  ERR_PUBLIC_KEY_IN_USE: {
    status: 409,
    message: 'Another session has registered this public key; each session registers a key pair of its own.',
  },
  ERR_USERNAME_TAKEN: { status: 409, message: 'This username is taken.' },
  ERR_NOTIFICATION_ALREADY_READ: { status: 409, message: 'This notification is already read.' },
  ERR_TRIAL_ALREADY_USED: { status: 409, message: 'This user has already had the trial; it is granted once.' },
  ERR_ROOM_NOT_RUNNING: { status: 409, message: 'The chat’s room VM is not running.' },
  ERR_VANITY_TAKEN: { status: 409, message: 'Another guild uses this vanity invite.' },
  ERR_METHOD_NOT_ALLOWED: { status: 405, message: 'This method is not allowed on this path.' },
  ERR_REQUEST_TIMEOUT: { status: 408, message: 'The request did not arrive in time.' },
  ERR_PRECONDITION_FAILED: { status: 412, message: 'A precondition of the request does not hold.' },
  ERR_PAYLOAD_TOO_LARGE: { status: 413, message: 'The request body is too large.' },
  ERR_UNSUPPORTED_MEDIA_TYPE: { status: 415, message: 'Send the body as application/json.' },
  ERR_RANGE_NOT_SATISFIABLE: { status: 416, message: 'The requested range is not satisfiable.' },
  ERR_INVALID_BUNDLE: { status: 422, message: 'The content is not a valid ciphertext bundle.' },
  ERR_RATE_LIMITED: { status: 429, message: 'Too many requests; try again later.' },
  ERR_TOO_MANY_CONNECTIONS: { status: 429, message: 'This session has too many sockets open.' },
  ERR_HEADERS_TOO_LARGE: { status: 431, message: 'The request headers are too large.' },
  ERR_INTERNAL: { status: 500, message: 'Something went wrong on our side.' },
  ERR_SERVICE_UNAVAILABLE: { status: 503, message: 'The service is not available right now.' },
  ERR_ROOM_START_FAILED: { status: 503, message: 'The room VM could not be started; try again later.' },
} as const satisfies Record<string, { status: number; message: string }>;

export type ErrorCode = keyof typeof ErrorCodes;

/** The body of every non-2xx answer. Extra fields appear where the spec names them. */
export interface ErrorBody {
  code: ErrorCode;
  message: string;
  errors?: { path: string; message: string }[];
  retry_after?: number;
  ttl?: number;
}
