CREATE TABLE "chat_activity" (
	"id" serial PRIMARY KEY NOT NULL,
	"chat_id" integer NOT NULL,
	"user_id" integer NOT NULL,
	"action" text NOT NULL,
	"method" text,
	"invite_code" text,
	"actor_user_id" integer,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "chat_invites" (
	"code" text PRIMARY KEY NOT NULL,
	"chat_id" integer NOT NULL,
	"created_by" integer NOT NULL,
	"max_uses" integer,
	"uses" integer DEFAULT 0 NOT NULL,
	"expires_at" timestamp with time zone,
	"revoked_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "chat_members" (
	"chat_id" integer NOT NULL,
	"user_id" integer NOT NULL,
	"joined_at" timestamp with time zone NOT NULL,
	"left_at" timestamp with time zone,
	CONSTRAINT "chat_members_chat_id_user_id_pk" PRIMARY KEY("chat_id","user_id")
);
--> statement-breakpoint
CREATE TABLE "chats" (
	"id" serial PRIMARY KEY NOT NULL,
	"type" text NOT NULL,
	"name" text NOT NULL,
	"owner_user_id" integer,
	"epoch" integer DEFAULT 1 NOT NULL,
	"msg_ms" bigint DEFAULT 0 NOT NULL,
	"msg_seq" integer DEFAULT 0 NOT NULL,
	"expires_at" timestamp with time zone,
	"archived_at" timestamp with time zone,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	"deleted_at" timestamp with time zone
);
--> statement-breakpoint
CREATE TABLE "key_envelopes" (
	"chat_id" integer NOT NULL,
	"epoch" integer NOT NULL,
	"recipient_session_id" integer NOT NULL,
	"sender_session_id" integer NOT NULL,
	"wrapped" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "key_envelopes_chat_id_epoch_recipient_session_id_pk" PRIMARY KEY("chat_id","epoch","recipient_session_id")
);
--> statement-breakpoint
CREATE TABLE "messages" (
	"chat_id" integer NOT NULL,
	"ms" bigint NOT NULL,
	"seq" integer NOT NULL,
	"type" text NOT NULL,
	"sender_id" integer,
	"content" text NOT NULL,
	"system" jsonb,
	"created_at" timestamp with time zone NOT NULL,
	CONSTRAINT "messages_chat_id_ms_seq_pk" PRIMARY KEY("chat_id","ms","seq")
);
--> statement-breakpoint
CREATE TABLE "session_keys" (
	"session_id" integer PRIMARY KEY NOT NULL,
	"user_id" integer NOT NULL,
	"public_key" text NOT NULL,
	"updated_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
ALTER TABLE "chat_activity" ADD CONSTRAINT "chat_activity_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_invites" ADD CONSTRAINT "chat_invites_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_members" ADD CONSTRAINT "chat_members_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chat_members" ADD CONSTRAINT "chat_members_user_id_users_id_fk" FOREIGN KEY ("user_id") REFERENCES "public"."users"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "chats" ADD CONSTRAINT "chats_owner_user_id_users_id_fk" FOREIGN KEY ("owner_user_id") REFERENCES "public"."users"("id") ON DELETE set null ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "key_envelopes" ADD CONSTRAINT "key_envelopes_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "messages" ADD CONSTRAINT "messages_chat_id_chats_id_fk" FOREIGN KEY ("chat_id") REFERENCES "public"."chats"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "session_keys" ADD CONSTRAINT "session_keys_session_id_sessions_id_fk" FOREIGN KEY ("session_id") REFERENCES "public"."sessions"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "chat_activity_chat_idx" ON "chat_activity" USING btree ("chat_id","id");--> statement-breakpoint
CREATE INDEX "chat_invites_chat_idx" ON "chat_invites" USING btree ("chat_id");--> statement-breakpoint
CREATE INDEX "chat_members_user_idx" ON "chat_members" USING btree ("user_id");--> statement-breakpoint
CREATE INDEX "chats_owner_idx" ON "chats" USING btree ("owner_user_id");--> statement-breakpoint
CREATE INDEX "messages_sender_idx" ON "messages" USING btree ("chat_id","sender_id");--> statement-breakpoint
CREATE INDEX "session_keys_user_idx" ON "session_keys" USING btree ("user_id");