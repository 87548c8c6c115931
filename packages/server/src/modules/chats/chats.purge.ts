import type { PartFailure } from '../../platform/background.js';
import { drain } from '../../platform/drain.js';
import type { DueChats } from './chats.purge.store.js';

/**
 * How many chats one step may find failing alone in one tick before it stops trying them one at a
 * time: when what fails is not a chat but the table (a lock on it, the database), every statement
 * of its own fails too, each after up to the statement timeout; this bounds what a tick spends so.
 */
export const CHAT_FAILURES_PER_STEP = 3;

/**
 * How long a chat that failed a step alone is left out of that step's statements on this node, so
 * that it holds up none of the others on the following ticks either (it would be among the oldest
 * due again each time); then it is tried again.
 */
export const FAILED_CHAT_RETRY_MS = 10 * 60_000;

/** The chats that failed one step alone on this node, each left out until its time comes again. */
export class HeldChats {
  private readonly until = new Map<number, number>();

  hold(chatId: number, now: number): void {
    this.until.set(chatId, now + FAILED_CHAT_RETRY_MS);
  }

  /** The chats still held at `now`; those whose time has come are let go. */
  at(now: number): number[] {
    for (const [chatId, until] of this.until) if (until <= now) this.until.delete(chatId);
    return [...this.until.keys()];
  }
}

/** One step of the purge of deleted chats (a table's clear, or the chats' own delete), as `drainByChat` runs it. */
export interface ChatPurgeStep {
  /** What the step does: named with each chat that fails it. */
  name: string;
  /** Handles up to `limit` rows (or chats) of the due chats `which` in one statement; answers how many. */
  run: (which: DueChats, limit: number) => Promise<number>;
  /** The due chats the step has left to do, `except` left out, oldest deletion first, a bounded list. */
  due: (except: readonly number[]) => Promise<number[]>;
}

/**
 * A step of the purge of deleted chats in batches while they come back full, at most `maxBatches`
 * (drain), each batch one statement over every due chat but those `held` (the common case);
 * should one fail, the due chats are done each in a statement of its own, read again as chats
 * fail, until they have handled `limit` between them or CHAT_FAILURES_PER_STEP chats have failed,
 * so that a chat whose rows cannot be deleted (a trigger or constraint refusing them, a row an ON
 * DELETE action must write held by a lock past the statement timeout) holds up none of the others.
 * A chat that fails alone is added to `failures` with its id and the step's name and held
 * (FAILED_CHAT_RETRY_MS) out of the step's later statements; it stays due, and is tried again
 * once its time comes. A batch that failed while no chat failed alone adds its own failure (it
 * must not go unlogged). Every statement takes its rows with SKIP LOCKED, so nodes running it at
 * once share the chats. Answers how many rows (or chats) the step handled.
 */
export function drainByChat(
  step: ChatPurgeStep,
  limit: number,
  maxBatches: number,
  failures: PartFailure[],
  held: { chats: HeldChats; now: number },
): Promise<number> {
  const out = held.chats.at(held.now);
  let alone = 0;
  return drain(limit, maxBatches, async () => {
    try {
      return await step.run({ except: [...out] }, limit);
    } catch (batchErr) {
      const before = failures.length;
      let handled = 0;
      let failedNow = true;
      // Read again while chats fail: those behind them are due too.
      while (failedNow && handled < limit && alone < CHAT_FAILURES_PER_STEP) {
        failedNow = false;
        for (const chatId of await step.due(out)) {
          if (handled >= limit || alone >= CHAT_FAILURES_PER_STEP) break;
          try {
            handled += await step.run({ only: chatId }, limit - handled);
          } catch (err) {
            out.push(chatId);
            held.chats.hold(chatId, held.now);
            alone += 1;
            failedNow = true;
            failures.push({ err, part: { step: step.name, chatId } });
          }
        }
      }
      if (failures.length === before) failures.push({ err: batchErr, part: { step: step.name } });
      return handled;
    }
  });
}
