import net from 'node:net';

/** A TCP port on `host` that was free a moment ago (bind port 0, read it, close). */
export async function findFreePort(host = '127.0.0.1'): Promise<number> {
  return new Promise<number>((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen({ host, port: 0, exclusive: true }, () => {
      const address = server.address();
      if (address === null || typeof address === 'string') {
        server.close();
        reject(new Error('findFreePort: server.address() returned no port'));
        return;
      }
      const { port } = address;
      server.close(() => resolve(port));
    });
  });
}
