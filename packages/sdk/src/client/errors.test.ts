import { describe, expect, it } from 'vitest';
import { ClientErrorCode, isApiError, ParlorApiError } from './errors.js';

describe('isApiError', () => {
  // The calls below are also a compile-time test: `tsc -p tsconfig.json` checks this file.
  it('takes the SDK’s own codes (ClientErrorCode) as well as the server’s catalogue codes', () => {
    const timedOut = ParlorApiError.fromAck({ code: ClientErrorCode.ERR_SOCKET_TIMEOUT, message: 'No answer.' });
    expect(isApiError(timedOut, ClientErrorCode.ERR_SOCKET_TIMEOUT, ClientErrorCode.ERR_NETWORK)).toBe(true);
    expect(isApiError(timedOut, 'ERR_RATE_LIMITED', ClientErrorCode.ERR_HTTP_TIMEOUT)).toBe(false);
    expect(isApiError(timedOut)).toBe(true);
    expect(isApiError(new Error('ERR_SOCKET_TIMEOUT'), ClientErrorCode.ERR_SOCKET_TIMEOUT)).toBe(false);
    // @ts-expect-error a code in neither list is a typo, not a check that never holds
    expect(isApiError(timedOut, 'ERR_SOCKET_TIMEOUTS')).toBe(false);
  });
});
