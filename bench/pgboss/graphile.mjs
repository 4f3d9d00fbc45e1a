// graphile-worker, measured the way bench/postgres measures delayd and pg-boss
// on the same PostgreSQL:
//
//   node graphile.mjs drain    URI [jobs=50000] [concurrency=4]
//                                                    ready jobs (added first, not timed) worked
//                                                    by a pool: each slot takes one job, runs
//                                                    it, completes it, as a serial beanstalk
//                                                    consumer does
//   node graphile.mjs lateness URI [jobs=20000] [spread_s=10] [concurrency=4]
//                                                    jobs due over spread_s, worked by such a
//                                                    pool polling every 0.5 s (future jobs
//                                                    are polled for; pg-boss's fastest is the
//                                                    same): the lateness of each
//
// Jobs are added in batches of 1,000 through graphile_worker.add_jobs. Each
// mode prints one line of key=value figures, like beanstalk_load. It talks
// to the URI given (the benchmark's own loopback PostgreSQL) and stops by
// itself.
import { Logger, makeWorkerUtils, run } from 'graphile-worker';

import { printLateness } from './report.mjs';

const [mode, uri, a1, a2, a3] = process.argv.slice(2);
if (!mode || !uri) {
  console.error(
    'usage: node graphile.mjs drain URI [jobs] [concurrency] | lateness URI [jobs] [spread_s] [concurrency]',
  );
  process.exit(2);
}
const logger = new Logger(() => () => {});  // quiet: only the figures are printed
const now = () => performance.now();

const utils = await makeWorkerUtils({ connectionString: uri, logger });
await utils.migrate();

// Adds one job per due time (wall ms; 0: ready now), 1,000 a statement.
async function add(dues) {
  for (let i = 0; i < dues.length; i += 1000) {
    const slice = dues.slice(i, i + 1000);
    await utils.withPgClient((c) =>
      c.query(
        `SELECT count(*) FROM graphile_worker.add_jobs((SELECT array_agg(row('work',
           json_build_object('due', d), NULL, CASE WHEN d = 0 THEN now() ELSE to_timestamp(d / 1000.0) END,
           NULL, NULL, NULL, NULL)::graphile_worker.job_spec) FROM unnest($1::int8[]) AS d))`,
        [slice],
      ),
    );
  }
}

// Runs a pool of `concurrency` until `done` resolves, calling
// `each(payload)` per job.
async function work(each, done, pollInterval, concurrency) {
  const runner = await run({
    connectionString: uri,
    concurrency,
    pollInterval,
    noHandleSignals: true,
    logger,
    taskList: { work: async (payload) => each(payload) },
  });
  await done;
  await runner.stop();
}

async function drain(jobs, concurrency) {
  await add(new Array(jobs).fill(0));
  let done;
  const all = new Promise((resolve) => (done = resolve));
  let n = 0;
  const start = now();
  const deadline = setTimeout(() => done(), 300_000);
  await work(
    () => {
      if (++n >= jobs) done();
    },
    all,
    500,
    concurrency,
  );
  clearTimeout(deadline);
  const s = (now() - start) / 1000;
  console.log(
    `drain jobs=${n} concurrency=${concurrency} seconds=${s.toFixed(3)} rate=${Math.round(n / s)}`,
  );
}

async function lateness(jobs, spread, concurrency) {
  // Due times spread evenly over `spread` seconds, starting 3 s from now so
  // that the adds are done before the first is due.
  const base = Date.now() + 3000;
  const dues = [];
  for (let i = 0; i < jobs; ++i) dues.push(base + Math.floor((i * spread * 1000) / jobs));
  await add(dues);
  const late = [];
  let done;
  const all = new Promise((resolve) => (done = resolve));
  const deadline = setTimeout(() => done(), (spread + 60) * 1000);
  await work(
    (payload) => {
      late.push(Date.now() - payload.due);
      if (late.length >= jobs) done();
    },
    all,
    500,
    concurrency,
  );
  clearTimeout(deadline);
  printLateness(jobs, late);
}

try {
  if (mode === 'drain') await drain(Number(a1 ?? 50000), Number(a2 ?? 4));
  else if (mode === 'lateness') await lateness(Number(a1 ?? 20000), Number(a2 ?? 10), Number(a3 ?? 4));
  else throw new Error(`unknown mode ${mode}`);
} finally {
  await utils.release();
}
