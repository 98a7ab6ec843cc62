/**
 * Login roles of the Citus suite, one per engine role. A delegated call runs on the worker as the
 * calling login (Citus connects as the current user), so `set role settle_app` on a superuser
 * session does not work there: settle_app cannot log in. Applications use login roles too.
 */
export const LOGIN_ROLES = {
  settle_citus_app: 'settle_app',
  settle_citus_readonly: 'settle_readonly',
  settle_citus_admin: 'settle_admin',
} as const;

export type LoginRole = keyof typeof LOGIN_ROLES;
