/** @parlor/sdk: the typed client of Parlor and its end-to-end encryption. */

export * from './client/index.js';
export * from './crypto/index.js';
