export { startConsole, CONTENT_SECURITY_POLICY, type ConsoleOptions, type RunningConsole } from './server.js';
export { escapeHtml } from './escape.js';
