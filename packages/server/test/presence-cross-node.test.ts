import { afterAll, beforeAll, expect, it } from 'vitest';
import { describeApp, MODE, type Nodes, startNodes } from './support/app.js';
import { join, type Member, member } from './support/chat-flows.js';
import { closeAllSockets, connectSocket } from './support/sockets.js';

// Cluster only: node A makes the match, the peer's sockets are on node B. (Embedded runs one node,
// where every socket is on the matching node: presence.test.ts covers it.)
let nodes: Nodes;
beforeAll(async () => {
  nodes = await startNodes();
});
afterAll(async () => {
  closeAllSockets();
  await nodes?.close();
});

let tagCounter = 0;
const tag = () => `xnode${Date.now() % 1000}x${++tagCounter}`;

/** `a` (on node B) waits on a fresh tag and `b` (on node A) pairs with it through node A: the chat's id. */
async function matchedOnA(a: Member, b: Member): Promise<number> {
  const t = tag();
  expect((await a.client.on(nodes.a).post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
  expect((await b.client.on(nodes.a).post('/v1/portal/match', { interests: [t] })).body.state).toBe('searching');
  return (await a.socket.next('match:found')).chat_id;
}

/** The `portal:presence` deltas a socket got about one session in one chat, in order. */
const presenceDeltas = (m: Member, chatId: number, sessionId: number) =>
  m.socket.received
    .filter((r) => r.event === 'portal:presence' && r.payload.chat_id === chatId && r.payload.session_id === sessionId)
    .map((r) => r.payload.online as boolean);

describeApp('presence of a matched user whose sockets are on another node than the match', () => {
  it.skipIf(MODE === 'embedded')(
    'its node says its session online as its socket enters the room, without a room:join; the opening message reaches it',
    async () => {
      const a = await member(nodes.b);
      const b = await member(nodes.a);
      const chatId = await matchedOnA(a, b);
      await b.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === a.sessionId && e.online);
      await a.socket.next('message:new', (m) => m.chat_id === chatId && m.system?.kind === 'match');
      // Its own join, later, says nothing more.
      expect((await join(a, { chat_id: chatId })).ok).toBe(true);
      expect((await join(b, { chat_id: chatId })).ok).toBe(true);
      a.socket.close();
      await b.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === a.sessionId && !e.online);
      expect(presenceDeltas(b, chatId, a.sessionId)).toEqual([true, false]);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'a socket that disconnects before any join is said online, then offline; never offline alone',
    async () => {
      const a = await member(nodes.b);
      const b = await member(nodes.a);
      const chatId = await matchedOnA(a, b);
      // match:found follows the room entry through node B's stream: its socket is in the room now.
      a.socket.close();
      await b.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === a.sessionId && !e.online);
      expect(presenceDeltas(b, chatId, a.sessionId)).toEqual([true, false]);
    },
  );

  it.skipIf(MODE === 'embedded')(
    'two sockets of one session on that node: said online once, offline once with the last',
    async () => {
      const a = await member(nodes.b);
      const second = await connectSocket(nodes.b.url, a.client);
      const b = await member(nodes.a);
      const chatId = await matchedOnA(a, b);
      await second.next('match:found', (e) => e.chat_id === chatId);
      a.socket.close();
      second.close();
      // Both sockets entered in one turn of node B, before either went: any online came before the
      // first offline (that only the last socket says it is presence.test.ts's logout case).
      await b.socket.next('portal:presence', (e) => e.chat_id === chatId && e.session_id === a.sessionId && !e.online);
      expect(presenceDeltas(b, chatId, a.sessionId).slice(0, 2)).toEqual([true, false]);
    },
  );
});
