/**
 * Viewers of the `vm` scenario, in a process of their own (lib/child.mjs) so that they never
 * share the server's event loop. Each is a real SDK client: ParlorClient (its session cookie and
 * address), the socket from `connect`, `joinRoom`, and `RoomVm`, which acknowledges each frame
 * as it arrives (the server keeps at most two frames in flight per viewer).
 * Commands:
 *   join({ url, publicKey, users, chatId })    connects every user and joins the chat
 *   startRoom()                                the first user (the chat owner) starts the room over
 *                                              REST, then watches: { startMs, firstFrameMs }
 *   stopRoom()                                 the owner stops it
 *   watch({ n })                               the first n viewers watch (the others do not)
 *   count({ ms })                              frames and bytes per watching viewer during `ms`, and
 *                                              this process's CPU (cores) meanwhile
 *   control()                                  the first viewer takes control
 *   latency({ samples, gapMs })                key presses by the controller; for each, the time
 *                                              until its next frame arrives
 *   unwatch()                                  every viewer stops watching
 */
import { connect, joinRoom, ParlorClient, RoomVm } from '../../packages/sdk/dist/index.js';

let viewers = [];
let owner = null;
let watching = [];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function nextFrame(v, timeoutMs = 5000) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error('no frame in time'));
    }, timeoutMs);
    const off = v.room.on('frame', (f) => {
      clearTimeout(timer);
      off();
      resolve(f);
    });
  });
}

export const commands = {
  async join({ url, publicKey, users, chatId }) {
    viewers = await Promise.all(
      users.map(async (u) => {
        const client = new ParlorClient({
          baseUrl: url,
          apiKey: publicKey,
          session: u.cookie,
          headers: { 'x-forwarded-for': u.ip, 'user-agent': 'parlor-bench/1' },
        });
        const socket = await connect(client, { reconnection: false });
        await joinRoom(socket, { chat_id: chatId });
        const v = { client, socket, room: new RoomVm(socket, chatId), frames: 0, bytes: 0 };
        v.room.on('frame', (f) => {
          v.frames += 1;
          v.bytes += f.data.byteLength;
        });
        return v;
      }),
    );
    owner = viewers[0];
    return { joined: viewers.length };
  },

  async startRoom() {
    const t0 = performance.now();
    await owner.client.startRoom(owner.room.chatId);
    const startMs = performance.now() - t0;
    const first = nextFrame(owner, 20_000);
    await owner.room.watch();
    await first;
    watching = [owner];
    return { startMs, firstFrameMs: performance.now() - t0 };
  },

  async stopRoom() {
    await owner.client.stopRoom(owner.room.chatId);
    watching = [];
    return {};
  },

  async watch({ n }) {
    watching = viewers.slice(0, n);
    await Promise.all(watching.map((v) => (v.room.watching ? null : v.room.watch())));
    return { watching: watching.length };
  },

  async count({ ms }) {
    for (const v of watching) {
      v.frames = 0;
      v.bytes = 0;
    }
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    await sleep(ms);
    const c = process.cpuUsage(c0);
    const cpu = (c.user + c.system) / 1000 / (performance.now() - t0);
    return { frames: watching.map((v) => v.frames), bytes: watching.map((v) => v.bytes), ms, cpu };
  },

  async control() {
    return owner.room.requestControl();
  },

  async latency({ samples, gapMs }) {
    const out = [];
    for (let i = 0; i < samples; i++) {
      await sleep(gapMs);
      const next = nextFrame(owner);
      const t0 = performance.now();
      await owner.room.input({ kind: 'key', type: 'down', key: 'a', code: 'KeyA' });
      await next;
      out.push(performance.now() - t0);
      await owner.room.input({ kind: 'key', type: 'up', key: 'a', code: 'KeyA' });
    }
    return { samples: out };
  },

  async unwatch() {
    await Promise.all(viewers.filter((v) => v.room.watching).map((v) => v.room.unwatch()));
    watching = [];
    return {};
  },

  async close() {
    for (const v of viewers) v.socket.disconnect();
  },
};
