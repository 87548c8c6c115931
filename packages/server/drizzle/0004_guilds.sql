CREATE TABLE "guild_sponsors" (
	"guild_id" integer NOT NULL,
	"user_id" integer NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "guild_sponsors_guild_id_user_id_pk" PRIMARY KEY("guild_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "guilds" (
	"id" serial PRIMARY KEY NOT NULL,
	"chatplatform_id" text NOT NULL,
	"name" text NOT NULL,
	"avatar_url" text,
	"prefix" text,
	"member_count" integer DEFAULT 0 NOT NULL,
	"is_whitelisted" boolean DEFAULT false NOT NULL,
	"owner_chatplatform_id" text,
	"state" integer DEFAULT 0 NOT NULL,
	"has_bot" boolean DEFAULT false NOT NULL,
	"source" text NOT NULL,
	"subscription_expires_at" timestamp with time zone,
	"vanity_invite" text,
	"chat_id" integer,
	"room_browser" text NOT NULL,
	"room_proxy" text NOT NULL,
	"room_start_url" text NOT NULL,
	"room_kiosk" boolean NOT NULL,
	"room_allow_control_requests" boolean NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "guild_sponsors" ADD CONSTRAINT "guild_sponsors_guild_id_guilds_id_fk" FOREIGN KEY ("guild_id") REFERENCES "public"."guilds"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "guild_sponsors" ADD CONSTRAINT "guild_sponsors_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "guilds" ADD CONSTRAINT "guilds_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "guild_sponsors_user_idx" ON "guild_sponsors" USING btree ("user_id");--> statement-breakpoint
CREATE UNIQUE INDEX "guilds_chatplatform_id_idx" ON "guilds" USING btree ("chatplatform_id");--> statement-breakpoint
CREATE UNIQUE INDEX "guilds_vanity_invite_idx" ON "guilds" USING btree ("vanity_invite");--> statement-breakpoint
CREATE INDEX "guilds_owner_idx" ON "guilds" USING btree ("owner_chatplatform_id");--> statement-breakpoint
CREATE UNIQUE INDEX "guilds_chat_idx" ON "guilds" USING btree ("chat_id");