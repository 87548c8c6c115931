import type { Command } from 'commander';
import type { Io } from '../io.js';
import { registerAudit } from './audit.js';
import { registerBots } from './bots.js';
import { registerChats } from './chats.js';
import { registerGuilds } from './guilds.js';
import { registerNotifications } from './notifications.js';
import { registerSubscriptions } from './subscriptions.js';
import { registerUsers } from './users.js';

/** Adds one command group (`parlor <group> …`) to the program. */
export type CommandGroup = (program: Command, io: Io) => void;

/** Every group, in the order `parlor --help` lists them. A new group is one file plus one line here. */
export const commandGroups: readonly CommandGroup[] = [
  registerBots,
  registerUsers,
  registerSubscriptions,
  registerNotifications,
  registerGuilds,
  registerChats,
  registerAudit,
];
