/** @parlor/sdk: the typed client of Parlor and its end-to-end encryption. */
export * from './crypto/index.js';
