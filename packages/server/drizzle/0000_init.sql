CREATE TABLE "audit_log" (
	"id" serial PRIMARY KEY NOT NULL,
	"actor_kind" text NOT NULL,
	"actor_id" integer,
	"target_user_id" integer,
	"target_bot_id" integer,
	"code" integer NOT NULL,
	"action" text NOT NULL,
	"reason" text,
	"data" jsonb DEFAULT '{}'::jsonb NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "bot_commands" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"bot_id" integer NOT NULL,
	"command" text NOT NULL,
	"user_id" integer,
	"guild_id" text,
	"success" boolean,
	"duration_ms" integer,
	"executed_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "bots" (
	"id" serial PRIMARY KEY NOT NULL,
	"name" text NOT NULL,
	"avatar_url" text,
	"type" integer DEFAULT 3 NOT NULL,
	"rate_limit_per_hour" integer NOT NULL,
	"key_hash" text NOT NULL,
	"owner_user_id" integer,
	"stats_users" integer,
	"stats_latency_ms" real,
	"stats_reported_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	"deleted_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "linked_platforms" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"platform" text NOT NULL,
	"platform_user_id" text NOT NULL,
	"platform_username" text NOT NULL,
	"platform_avatar_url" text NOT NULL,
	"linked_at" timestamp with time zone NOT NULL,
	"last_authenticated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "moderation_actions" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"chat_id" integer,
	"action_type" text NOT NULL,
	"reason" text,
	"actor_user_id" integer,
	"expires_at" timestamp with time zone,
	"lifted_at" timestamp with time zone,
	"is_lifted" boolean DEFAULT false NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "notifications" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"title" text NOT NULL,
	"body" text NOT NULL,
	"type" text NOT NULL,
	"read_at" timestamp with time zone,
	"created_by" integer,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "sessions" (
	"id" serial PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"token_hash" text NOT NULL,
	"token_suffix" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"ended_at" timestamp with time zone,
	"end_reason" text,
	"client_ip" text NOT NULL,
	"user_agent" text NOT NULL,
	"geo" jsonb NOT NULL,
	"last_seen_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "users" (
	"id" serial PRIMARY KEY NOT NULL,
	"username" text NOT NULL,
	"avatar_source" text DEFAULT '' NOT NULL,
	"subscription_tier" integer DEFAULT 0 NOT NULL,
	"subscription_expires_at" timestamp with time zone,
	"subscription_granted_by" integer,
	"state" integer DEFAULT 0 NOT NULL,
	"state_expires_at" timestamp with time zone,
	"permission_level" integer DEFAULT 0 NOT NULL,
	"permission_since" timestamp with time zone,
	"bot_logins_since_web" integer DEFAULT 0 NOT NULL,
	"last_activity_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "bot_commands" ADD CONSTRAINT "bot_commands_bot_id_bots_id_fk" FOREIGN KEY ("bot_id") REFERENCES "public"."bots"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "linked_platforms" ADD CONSTRAINT "linked_platforms_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "moderation_actions" ADD CONSTRAINT "moderation_actions_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "notifications" ADD CONSTRAINT "notifications_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "sessions" ADD CONSTRAINT "sessions_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "audit_log_target_user_idx" ON "audit_log" USING btree ("target_user_id","code");--> statement-breakpoint
CREATE INDEX "bot_commands_bot_idx" ON "bot_commands" USING btree ("bot_id","executed_at");--> statement-breakpoint
CREATE UNIQUE INDEX "bots_key_hash_idx" ON "bots" USING btree ("key_hash");--> statement-breakpoint
CREATE UNIQUE INDEX "linked_platforms_identity_idx" ON "linked_platforms" USING btree ("platform","platform_user_id");--> statement-breakpoint
CREATE INDEX "linked_platforms_user_idx" ON "linked_platforms" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "moderation_actions_user_idx" ON "moderation_actions" USING btree ("user_id","created_at");--> statement-breakpoint
CREATE INDEX "notifications_user_idx" ON "notifications" USING btree ("user_id","id");--> statement-breakpoint
CREATE UNIQUE INDEX "sessions_token_hash_idx" ON "sessions" USING btree ("token_hash");--> statement-breakpoint
CREATE INDEX "sessions_user_idx" ON "sessions" USING btree ("user_id","ended_at");--> statement-breakpoint
CREATE UNIQUE INDEX "users_username_lower_idx" ON "users" USING btree (lower("username"));