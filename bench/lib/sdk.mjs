/**
 * @parlor/sdk's end-to-end crypto (packages/sdk/dist), for scenarios that key chats and send
 * messages the way a client does. Build it first: `npx tsc -b packages/protocol packages/sdk`.
 */
export {
  buildKeyShare,
  encryptMessage,
  generateChatKey,
  generateKeyPair,
  publicKeyToBase64,
} from '../../packages/sdk/dist/index.js';
