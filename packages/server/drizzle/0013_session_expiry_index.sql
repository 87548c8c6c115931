-- The expiry sweep reads the sessions that expired and that nothing ended yet through this index
-- (sessions.store expiryDue); ending them removes their keys and raises their chats' epochs.
CREATE INDEX "sessions_expiry_idx" ON "sessions" USING btree ("expires_at") WHERE "sessions"."ended_at" is null;