ALTER TABLE "users" ADD COLUMN "then_state" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "users" ADD COLUMN "then_state_expires_at" timestamp with time zone;--> statement-breakpoint
-- Every user's state derived again from its active punishment records, as the server derives it
-- (moderation.store platformState): the follow-on state for users banned until a time whose
-- timeout outlasts the ban, and the state of users whose ban an earlier version let a later
-- timeout overwrite. Users with no active record and a state set are made Active, as the expiry
-- sweep would.
WITH r AS (
  SELECT m."user_id", m."action_type" = 'PLATFORM_BAN' AS ban, m."expires_at" AS ends
  FROM "moderation_actions" AS m
  WHERE m."action_type" IN ('PLATFORM_BAN', 'PLATFORM_TIMEOUT') AND m."is_lifted" = false
    AND (m."expires_at" IS NULL OR m."expires_at" > now())
), cur AS (
  SELECT "user_id", CASE WHEN bool_or(ban) THEN 2 ELSE 1 END AS state,
    CASE WHEN bool_or(ban) THEN CASE WHEN bool_or(ban AND ends IS NULL) THEN NULL ELSE max(ends) FILTER (WHERE ban) END
      WHEN bool_or(ends IS NULL) THEN NULL ELSE max(ends) END AS ends
  FROM r GROUP BY "user_id"
), nxt AS (
  SELECT c."user_id", CASE WHEN bool_or(r.ends IS NULL) THEN NULL ELSE max(r.ends) END AS ends
  FROM cur AS c JOIN r ON r."user_id" = c."user_id" AND NOT r.ban AND (r.ends IS NULL OR r.ends > c.ends)
  WHERE c.ends IS NOT NULL
  GROUP BY c."user_id"
), d AS (
  SELECT u."id", coalesce(cur.state, 0) AS state, cur.ends,
    CASE WHEN nxt."user_id" IS NULL THEN 0 ELSE 1 END AS then_state, nxt.ends AS then_ends
  FROM "users" AS u LEFT JOIN cur ON cur."user_id" = u."id" LEFT JOIN nxt ON nxt."user_id" = u."id"
  WHERE u."state" <> 0 OR cur."user_id" IS NOT NULL
)
UPDATE "users" AS u SET "state" = d.state, "state_expires_at" = d.ends, "then_state" = d.then_state,
  "then_state_expires_at" = d.then_ends
FROM d
WHERE u."id" = d."id"
  AND (u."state", u."state_expires_at", u."then_state", u."then_state_expires_at")
    IS DISTINCT FROM (d.state, d.ends, d.then_state, d.then_ends);
