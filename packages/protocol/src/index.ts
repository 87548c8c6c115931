export * from './admin.js';
export * from './auth.js';
export * from './bots.js';
export * from './common.js';
export * from './constants.js';
export * from './errors.js';
export * from './stats.js';
export * from './users.js';
