import { Type } from '@sinclair/typebox';

export const HealthResponse = Type.Object({
  status: Type.Literal('ok'),
  source_hash: Type.String({ description: 'git commit the running build was made from' }),
  uptime_seconds: Type.Integer(),
  version: Type.String(),
  storage: Type.Union([Type.Literal('embedded'), Type.Literal('cluster')]),
});

export const UserStatistics = Type.Object({
  total: Type.Integer(),
  active_24h: Type.Integer(),
  new_24h: Type.Integer(),
  premium: Type.Integer(),
  banned: Type.Integer(),
  sessions_active: Type.Integer(),
});

export const BotStatistics = Type.Object({
  total: Type.Integer(),
  official: Type.Integer(),
  verified: Type.Integer(),
  community: Type.Integer(),
});

export const ChatStatistics = Type.Object({
  active_browsers: Type.Integer(),
  viewers: Type.Integer(),
  controllers: Type.Integer(),
});

export const AppStatistics = Type.Object({
  version: Type.String(),
  uptime_seconds: Type.Integer(),
  users: Type.Integer(),
  bots: Type.Integer(),
  sessions_active: Type.Integer(),
});
