CREATE INDEX "bot_commands_created_idx" ON "bot_commands" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "chat_activity_created_idx" ON "chat_activity" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "notifications_created_idx" ON "notifications" USING btree ("created_at");--> statement-breakpoint
CREATE INDEX "sessions_over_idx" ON "sessions" USING btree (least("ended_at", "expires_at"));