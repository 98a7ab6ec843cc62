/** The SQLSTATE a promise rejects with; throws if it resolves or fails without one. */
export async function sqlStateOf(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    throw error;
  }
  throw new Error('expected an SQL error, but the statement succeeded');
}
