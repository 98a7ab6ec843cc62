import { afterAll, beforeAll } from 'vitest';

/**
 * A resource of the calling test file: `setup` runs in beforeAll, `teardown` in afterAll. The
 * returned object reads `keys` from the resource once it exists (before beforeAll it throws).
 */
export function usePerFile<T extends object, K extends keyof T>(
  what: string,
  setup: () => Promise<T>,
  teardown: (resource: T) => Promise<void>,
  keys: readonly K[],
): Pick<T, K> {
  let resource: T | undefined;
  beforeAll(async () => {
    resource = await setup();
  });
  afterAll(async () => {
    if (resource !== undefined) await teardown(resource);
  });
  const view = {} as Pick<T, K>;
  for (const key of keys) {
    Object.defineProperty(view, key, {
      enumerable: true,
      get: () => {
        if (resource === undefined) throw new Error(`${what}: not set up yet (it is, in beforeAll)`);
        return resource[key];
      },
    });
  }
  return view;
}
