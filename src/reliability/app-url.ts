/**
 * A connection string that logs in as the superuser of `url` but acts as `role` from the first
 * statement (`options=-c role=...`), tagged with `application_name` so a nemesis can find and
 * terminate exactly these backends in pg_stat_activity.
 */
export function roleUrl(url: string, applicationName: string, role = 'settle_app'): string {
  const parsed = new URL(url);
  parsed.searchParams.set('options', `-c role=${role}`);
  parsed.searchParams.set('application_name', applicationName);
  return parsed.toString();
}
