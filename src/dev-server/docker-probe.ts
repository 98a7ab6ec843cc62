import { existsSync } from 'node:fs';
import http from 'node:http';

/**
 * True when a Docker daemon answers `GET /_ping` within `timeoutMs`.
 *
 * testcontainers itself rejects in ~2 ms when no socket exists, but a socket that accepts and
 * never answers makes it hang for minutes; this probe bounds that case.
 * Honours `DOCKER_HOST` (`unix://` and `tcp://`), else `/var/run/docker.sock`.
 */
export async function dockerAnswersPing(timeoutMs = 1500): Promise<boolean> {
  const target = dockerTarget();
  if (target === undefined) return false;

  return new Promise<boolean>((resolve) => {
    let settled = false;
    const finish = (answer: boolean): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      request.destroy();
      resolve(answer);
    };
    const request = http.get({ ...target, path: '/_ping', headers: { host: 'docker' } }, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => finish(response.statusCode === 200 && body.trim() === 'OK'));
      response.on('error', () => finish(false));
    });
    request.on('error', () => finish(false));
    const timer = setTimeout(() => finish(false), timeoutMs);
  });
}

type DockerTarget = { socketPath: string } | { host: string; port: number };

function dockerTarget(): DockerTarget | undefined {
  const dockerHost = process.env.DOCKER_HOST;
  if (dockerHost !== undefined && dockerHost !== '') {
    const url = new URL(dockerHost);
    if (url.protocol === 'unix:') return existsSync(url.pathname) ? { socketPath: url.pathname } : undefined;
    if (url.protocol === 'tcp:' || url.protocol === 'http:') {
      return { host: url.hostname, port: url.port === '' ? 2375 : Number(url.port) };
    }
    return undefined;
  }
  const socketPath = '/var/run/docker.sock';
  return existsSync(socketPath) ? { socketPath } : undefined;
}
