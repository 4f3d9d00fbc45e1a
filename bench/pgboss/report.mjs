// What bench.mjs and graphile.mjs print of a lateness run: one line of
// key=value figures, like beanstalk_load's. `late` holds each job's
// lateness in ms, and is sorted here.
export function printLateness(jobs, late) {
  late.sort((x, y) => x - y);
  const q = (p) => late[Math.min(late.length - 1, Math.floor(p * late.length))];
  console.log(
    `lateness jobs=${jobs} delivered=${late.length} p50_ms=${q(0.5)} p99_ms=${q(0.99)} ` +
      `max_ms=${late[late.length - 1]}`,
  );
}
