import type { PartFailure } from '../../platform/background.js';
import { drain } from '../../platform/drain.js';
import type { DueChats } from './chats.purge.store.js';

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
 * (drain), each batch one statement over every due chat (the common case); should one fail, that
 * batch's chats are done each in a statement of its own, until they have handled `limit` between
 * them, so that a chat whose rows cannot be deleted (a trigger or constraint refusing them, a row
 * an ON DELETE action must write held by a lock past the statement timeout) holds up none of the
 * others. A chat that fails alone is added to `failures` with its id and the step's name, and left
 * out of the step's later batches; it stays due, so the next sweep tries it again. A batch that
 * failed while no chat failed alone adds its own failure (it must not go unlogged). Every statement
 * takes its rows with SKIP LOCKED, so nodes running it at once share the chats. Answers how many
 * rows (or chats) the step handled.
 */
export function drainByChat(
  step: ChatPurgeStep,
  limit: number,
  maxBatches: number,
  failures: PartFailure[],
): Promise<number> {
  const failed: number[] = [];
  return drain(limit, maxBatches, async () => {
    try {
      return await step.run({ except: [...failed] }, limit);
    } catch (batchErr) {
      const before = failures.length;
      let handled = 0;
      for (const chatId of await step.due(failed)) {
        if (handled >= limit) break;
        try {
          handled += await step.run({ only: chatId }, limit - handled);
        } catch (err) {
          failed.push(chatId);
          failures.push({ err, part: { step: step.name, chatId } });
        }
      }
      if (failures.length === before) failures.push({ err: batchErr, part: { step: step.name } });
      return handled;
    }
  });
}
