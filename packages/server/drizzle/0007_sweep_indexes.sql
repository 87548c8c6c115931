CREATE INDEX "chats_direct_expiry_idx" ON "chats" USING btree ("expires_at") WHERE "chats"."type" = 'direct' and "chats"."deleted_at" is null and "chats"."archived_at" is null;--> statement-breakpoint
CREATE INDEX "chats_direct_archived_idx" ON "chats" USING btree ("archived_at") WHERE "chats"."type" = 'direct' and "chats"."deleted_at" is null;--> statement-breakpoint
CREATE INDEX "chats_direct_removed_idx" ON "chats" USING btree ("deleted_at") WHERE "chats"."type" = 'direct';--> statement-breakpoint
CREATE INDEX "moderation_actions_expiry_idx" ON "moderation_actions" USING btree ("expires_at") WHERE "moderation_actions"."is_lifted" = false;--> statement-breakpoint
CREATE INDEX "users_state_expiry_idx" ON "users" USING btree ("state_expires_at") WHERE "users"."state" in (1, 2);