CREATE INDEX "chat_invites_creator_idx" ON "chat_invites" USING btree ("created_by");--> statement-breakpoint
-- Live invites to private chats whose creator's account was deleted before deletions revoked them:
-- no join honours them, yet they held places of their chat's invite limit.
UPDATE "chat_invites" SET "revoked_at" = now()
WHERE "revoked_at" IS NULL
  AND ("expires_at" IS NULL OR "expires_at" > now())
  AND ("max_uses" IS NULL OR "uses" < "max_uses")
  AND "chat_id" IN (SELECT "id" FROM "chats" WHERE "type" = 'private')
  AND NOT EXISTS (SELECT 1 FROM "users" WHERE "users"."id" = "chat_invites"."created_by");
