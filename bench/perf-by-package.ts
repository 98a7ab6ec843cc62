// Where a Node process's CPU goes, by package: reads `perf script -F comm,tid,ip,sym` output of a
// process run with `node --perf-basic-prof --interpreted-frames-native-stack` and charges each
// sample to the innermost JavaScript frame of its stack (V8 builtins, runtime and the kernel work
// a call does synchronously, such as a socket write, go to the JavaScript that called them);
// samples without a JavaScript frame are garbage collection or other native work.
//   NODE_OPTIONS='--perf-basic-prof --interpreted-frames-native-stack' npx tsx bench/client-ratio.ts --only client --rounds 1 --duration 20 &
//   perf record -F 4999 -g -p <pid of that node process> -- sleep 10
//   perf script -F comm,tid,ip,sym | npx tsx bench/perf-by-package.ts
import { createInterface } from 'node:readline';

const byPackage = new Map<string, number>();
const byFunction = new Map<string, number>();
let total = 0;
let stack: string[] = [];
const add = (map: Map<string, number>, key: string) => map.set(key, (map.get(key) ?? 0) + 1);
const packageOf = (frame: string): string =>
  /node_modules\/((@[^/]+\/)?[^/]+)/.exec(frame)?.[1] ??
  /(src\/[^:]+|bench\/[^:]+|node:[^:]+)/.exec(frame)?.[1] ??
  frame.slice(0, 60);
const flush = () => {
  if (stack.length === 0) return;
  total += 1;
  const js = stack.find((frame) => frame.startsWith('JS:'));
  if (js !== undefined) {
    add(byPackage, packageOf(js));
    add(byFunction, js.slice(0, 140));
  } else {
    add(
      byPackage,
      stack.some((frame) => /Scaveng|GC|Marking|Sweeper|Heap::/.test(frame))
        ? '(garbage collection)'
        : '(native, no JS frame)',
    );
  }
  stack = [];
};
for await (const line of createInterface({ input: process.stdin })) {
  if (line.trim() === '' || /^\S/.test(line)) flush();
  else stack.push(line.trim().split(/\s+/).slice(1).join(' '));
}
flush();
const show = (map: Map<string, number>, count: number) =>
  [...map]
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .forEach(([key, n]) => console.log(`${((100 * n) / total).toFixed(1).padStart(5)}%  ${key}`));
console.log(`${total} samples; by package:`);
show(byPackage, 25);
console.log('by function:');
show(byFunction, 30);
