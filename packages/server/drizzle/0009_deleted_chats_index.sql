DROP INDEX "chats_direct_removed_idx";--> statement-breakpoint
CREATE INDEX "chats_deleted_idx" ON "chats" USING btree ("deleted_at") WHERE "chats"."deleted_at" is not null;