ALTER TABLE "notifications" ADD COLUMN "broadcast_id" uuid;--> statement-breakpoint
CREATE INDEX "notifications_broadcast_idx" ON "notifications" USING btree ("broadcast_id") WHERE "notifications"."broadcast_id" is not null;--> statement-breakpoint
CREATE INDEX "users_subscription_expiry_idx" ON "users" USING btree ("subscription_expires_at") WHERE "users"."subscription_tier" in (1, 2);