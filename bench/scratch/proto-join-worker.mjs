import { connectSio, ignored } from '../lib/sio-client.mjs';
export async function joinTask({ url, cookies, chatId, conc }) {
  const sockets = [];
  const t0 = performance.now();
  const marks = [];
  let next = 0;
  const loop = async () => {
    while (next < cookies.length) {
      const i = next++;
      const s = await connectSio(url, cookies[i]);
      const ack = await s.emitWithAck('room:join', { chat_id: chatId });
      if (!ack.ok) throw new Error(JSON.stringify(ack));
      sockets.push(s);
      if (sockets.length % 100 === 0) marks.push([sockets.length, Math.round(performance.now() - t0), ignored.bytes]);
    }
  };
  await Promise.all(Array.from({ length: conc }, loop));
  const total = performance.now() - t0;
  await new Promise((r) => setTimeout(r, 1000));
  for (const s of sockets) s.close();
  return { total, marks, ignored };
}
