-- One session per public key. Before this index a session could register a key another session had
-- registered (public keys are public: key rings, portal:key_added), and key rings then listed one
-- key under two sessions. Where several sessions hold one key, the key row kept is that of a live
-- session (not ended, not expired) before others, then the oldest registration (updated_at), then
-- the lowest session id; the other sessions' key rows are deleted. This is not the removal a
-- session end makes (no portal:key_removed, no rekey): those are events a migration cannot send,
-- and none is needed for secrecy, since whoever holds that key's private half still holds the kept
-- row. A session that lost its row has no key: its client registers a new key pair
-- (docs/operations.md, Data retention, Upgrading).
DELETE FROM "session_keys" AS k
USING (
  SELECT sk."session_id",
    row_number() OVER (
      PARTITION BY sk."public_key"
      ORDER BY (s."ended_at" IS NULL AND s."expires_at" > now()) DESC, sk."updated_at", sk."session_id"
    ) AS rn
  FROM "session_keys" AS sk
  JOIN "sessions" AS s ON s."id" = sk."session_id"
) AS d
WHERE k."session_id" = d."session_id" AND d.rn > 1;--> statement-breakpoint
CREATE UNIQUE INDEX "session_keys_public_key_idx" ON "session_keys" USING btree ("public_key");
