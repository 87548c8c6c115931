-- The bot that first reported each guild: only it (and Official bots) may report the guild again,
-- so another bot's key cannot move its owner. Guilds already stored get null (not known): the next
-- bot that reports such a guild is recorded (docs/api.md, Guilds).
ALTER TABLE "guilds" ADD COLUMN "reported_by_bot_id" integer;--> statement-breakpoint
ALTER TABLE "guilds" ADD CONSTRAINT "guilds_reported_by_bot_id_bots_id_fk" FOREIGN KEY ("reported_by_bot_id") REFERENCES "public"."bots"("id") ON DELETE set null ON UPDATE no action;