import { describe, expect, it } from 'vitest';
import { AppError } from '../../platform/errors.js';
import type { ControlDeps, ControlledRoom } from './vm.control.js';
import { makeRoomControl } from './vm.control.js';
import { DEFAULT_ROOM_SETTINGS } from './vm.settings.js';

const chatId = 7;
const controller = 11;

/** The room, its controller holding control, no input in flight and no request pending. */
const controlledRoom = (): ControlledRoom => ({
  chatId,
  settings: { ...DEFAULT_ROOM_SETTINGS },
  controller,
  inputsInFlight: 0,
  requests: new Map(),
});

/**
 * The controller's input to a room whose browser answers only when the test says so: each input
 * event waits on a promise the test settles, as a browser busy with a page does (or, with
 * `failing`, each input fails at once, as on a browser that went away).
 */
function roomWithHeldBrowser(failing?: () => Promise<void>) {
  const waiting: (() => void)[] = [];
  const room = controlledRoom();
  const held = () => new Promise<void>((resolve) => waiting.push(resolve));
  const deps = {
    provider: { input: failing ?? held, navigate: held, releaseInput: async () => {} },
    hosted: new Map([[chatId, room]]),
    now: () => Date.now(),
  } as unknown as ControlDeps;
  return { control: makeRoomControl(deps), room, waiting };
}

const move = { chat_id: chatId, kind: 'mouse', type: 'move', x: 1, y: 1 } as const;

/**
 * How an input event ended: 'sent', the AppError's code and retry_after, or 'waiting' when it has
 * not ended once pending callbacks have run (a refusal ends at once; only the browser holds one).
 */
const outcome = (p: Promise<void>) =>
  Promise.race([
    p.then(
      () => 'sent',
      (e: unknown) => (e instanceof AppError ? { code: e.code, retry_after: e.extra.retry_after } : e),
    ),
    new Promise((resolve) => setImmediate(() => resolve('waiting'))),
  ]);

describe('vm:input events waiting for the browser (docs/api.md vm:input: at most 64 per room)', () => {
  it('takes 64 unanswered events, refuses the 65th with ERR_RATE_LIMITED retry_after 1, and takes one more once one is answered', async () => {
    const { control, room, waiting } = roomWithHeldBrowser();
    const accepted = Array.from({ length: 64 }, () => control.input(chatId, controller, move));
    expect(waiting).toHaveLength(64);
    expect(room.inputsInFlight).toBe(64);

    expect(await outcome(control.input(chatId, controller, move))).toEqual({
      code: 'ERR_RATE_LIMITED',
      retry_after: 1,
    });
    expect(
      await outcome(control.input(chatId, controller, { chat_id: chatId, kind: 'navigate', action: 'reload' })),
    ).toEqual({ code: 'ERR_RATE_LIMITED', retry_after: 1 });
    expect(waiting).toHaveLength(64);

    waiting[0]?.();
    expect(await outcome(accepted[0] as Promise<void>)).toBe('sent');
    expect(room.inputsInFlight).toBe(63);
    const next = control.input(chatId, controller, move);
    expect(waiting).toHaveLength(65);
    expect(room.inputsInFlight).toBe(64);

    for (const answer of waiting.slice(1)) answer();
    expect(await Promise.all([...accepted.slice(1), next].map(outcome))).toEqual(Array(64).fill('sent'));
    expect(room.inputsInFlight).toBe(0);
  });

  it('counts an event the browser failed on as answered: 65 failures in a row are each tried', async () => {
    const { control, room } = roomWithHeldBrowser(async () => {
      throw new Error('target closed');
    });
    for (let i = 0; i < 65; i += 1)
      await expect(control.input(chatId, controller, move)).rejects.toThrow('target closed');
    expect(room.inputsInFlight).toBe(0);
  });
});

describe('a controller’s leave (userLeft) while its sockets are looked up', () => {
  it('leaves control granted to the user anew during the look-up: only control unchanged since the leave is dropped', async () => {
    const who = { userId: controller, permissionLevel: 0, username: 'u' };
    // The leave's look-up of the chat's sockets waits until the test answers it (a slow node);
    // every later look-up finds the user back in the chat with a new socket.
    let answerLeave: (sockets: object[]) => void = () => {};
    const leaveRead = new Promise<object[]>((resolve) => {
      answerLeave = resolve;
    });
    let reads = 0;
    const back = [{ id: 'new-socket', data: { userId: controller } }];
    const room = controlledRoom();
    const announced: (number | null)[] = [];
    const control = makeRoomControl({
      provider: { releaseInput: async () => {} },
      chats: { assertMember: async () => {} },
      realtime: {
        socketsIn: async () => ({ sockets: (reads++ === 0 ? await leaveRead : back) as never, complete: true }),
        emitTo: (_to: string, event: string, payload: { controller_user_id: number | null }) => {
          if (event === 'vm:control') announced.push(payload.controller_user_id);
        },
      },
      hosted: new Map([[chatId, room]]),
      now: () => Date.now(),
    } as unknown as ControlDeps);

    const leaving = control.userLeft(chatId, controller);
    // Back in the chat meanwhile, the user gives control up and takes it again, as the room is free.
    await control.release(chatId, who);
    expect(await control.requestControl(chatId, who)).toEqual({ granted: true, controller_user_id: controller });
    // The leave's look-up, begun before the user came back, finds none of their sockets.
    answerLeave([]);
    await leaving;
    expect(room.controller).toBe(controller);
    expect(announced).toEqual([null, controller]);
  });
});
