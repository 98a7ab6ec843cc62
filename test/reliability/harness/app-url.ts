/**
 * A connection string that logs in as the superuser of `url` but acts as `role` from the first
 * statement (`options=-c role=...`), tagged with `application_name` so a nemesis can find and
 * terminate exactly these backends in pg_stat_activity. `settings` become further `-c` options
 * (e.g. default_transaction_isolation).
 */
export function roleUrl(
  url: string,
  applicationName: string,
  role = 'settle_app',
  settings: Record<string, string> = {},
): string {
  const parsed = new URL(url);
  const extra = Object.entries(settings).map(([name, value]) => ` -c ${name}=${value.replaceAll(' ', '\\ ')}`);
  parsed.searchParams.set('options', `-c role=${role}${extra.join('')}`);
  parsed.searchParams.set('application_name', applicationName);
  return parsed.toString();
}
