-- A public key as X25519 writes it: standard base64 of 32 bytes with the top bit of the last byte
-- clear and u (little-endian) below 2^255 - 19. Earlier versions took a key with that bit set, or
-- a u of 2^255 - 19 or more (the same key as the one written without it, RFC 7748 section 5), and
-- rings still list such rows: clients refuse them and skip their sessions, while a share must cover
-- every session of the ring, so no chat whose ring lists one could be keyed again. Those rows are
-- deleted. As with migration 0012, this is not the removal a session end makes (no
-- portal:key_removed, no rekey: events a migration cannot send) and no epoch rises: a key row
-- grants nothing a membership does not, and honest clients never wrote such a key. A session that
-- lost its row has no key until its client registers a new key pair (docs/operations.md,
-- Upgrading). The text is checked first: only canonical base64 is decoded, and a row that is not
-- canonical base64 of 32 bytes is deleted too.
DELETE FROM "session_keys"
WHERE CASE
  WHEN "public_key" ~ '^[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=$' THEN
    get_byte(decode("public_key", 'base64'), 31) >= 128
    OR (
      substring(decode("public_key", 'base64') FROM 2) = decode(repeat('ff', 30) || '7f', 'hex')
      AND get_byte(decode("public_key", 'base64'), 0) >= 237
    )
  ELSE true
END;
