ALTER TABLE "users" ADD COLUMN "then_state" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "users" ADD COLUMN "then_state_expires_at" timestamp with time zone;--> statement-breakpoint
-- Users banned until a time with a timeout that outlasts the ban: the timeout follows the ban.
UPDATE "users" AS u SET "then_state" = 1, "then_state_expires_at" = t.ends
FROM (
  SELECT m."user_id", CASE WHEN bool_or(m."expires_at" IS NULL) THEN NULL ELSE max(m."expires_at") END AS ends
  FROM "moderation_actions" AS m JOIN "users" AS x ON x."id" = m."user_id"
  WHERE m."action_type" = 'PLATFORM_TIMEOUT' AND m."is_lifted" = false
    AND x."state" = 2 AND x."state_expires_at" IS NOT NULL
    AND (m."expires_at" IS NULL OR m."expires_at" > x."state_expires_at")
  GROUP BY m."user_id"
) AS t
WHERE u."id" = t."user_id";
