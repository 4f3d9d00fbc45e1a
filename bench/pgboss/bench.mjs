// pg-boss, measured the way bench/run measures delayd on the same PostgreSQL:
//
//   node bench.mjs insert   URI [jobs=100000]        batched inserts (1,000 a call), delayed 1 h
//   node bench.mjs send     URI [jobs=20000]         single sends, 64 in flight, delayed 1 h
//   node bench.mjs drain    URI [jobs=50000]         ready jobs (inserted first, not timed) taken
//                                                    and completed by 4 lanes, 64 a fetch, as
//                                                    beanstalk_load drain reserves and deletes
//   node bench.mjs lateness URI [jobs=20000] [spread_s=10]
//                                                    jobs due over spread_s, worked by 4 workers
//                                                    at pg-boss's fastest polling (0.5 s), 1,000
//                                                    a poll: the lateness of each
//
// Each prints one line of key=value figures, like beanstalk_load. It talks to the
// URI given (the benchmark's own loopback PostgreSQL) and stops by itself.
import { PgBoss } from 'pg-boss';

import { printLateness } from './report.mjs';

const [mode, uri, a1, a2] = process.argv.slice(2);
if (!mode || !uri) {
  console.error('usage: node bench.mjs insert|send|drain|lateness URI [jobs] [spread_s]');
  process.exit(2);
}
const queue = `bench_${mode}_${process.pid}`;
const boss = new PgBoss({ connectionString: uri, max: 16 });
boss.on('error', (e) => console.error('pg-boss:', e.message));
await boss.start();
await boss.createQueue(queue);

const now = () => performance.now();
const later = (s) => new Date(Date.now() + s * 1000);

async function insert(jobs) {
  const start = now();
  for (let i = 0; i < jobs; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(jobs, i + 1000); ++j) {
      batch.push({ data: { i: j }, startAfter: later(3600) });
    }
    await boss.insert(queue, batch);
  }
  const s = (now() - start) / 1000;
  console.log(`insert jobs=${jobs} seconds=${s.toFixed(3)} rate=${Math.round(jobs / s)}`);
}

async function send(jobs) {
  const start = now();
  let next = 0;
  const lane = async () => {
    while (next < jobs) {
      const i = next++;
      await boss.send(queue, { i }, { startAfter: 3600 });
    }
  };
  await Promise.all(Array.from({ length: 64 }, lane));
  const s = (now() - start) / 1000;
  console.log(`send jobs=${jobs} in_flight=64 seconds=${s.toFixed(3)} rate=${Math.round(jobs / s)}`);
}

async function drain(jobs) {
  for (let i = 0; i < jobs; i += 1000) {
    const batch = [];
    for (let j = i; j < Math.min(jobs, i + 1000); ++j) batch.push({ data: { i: j } });
    await boss.insert(queue, batch);
  }
  const start = now();
  let done = 0;
  const lane = async () => {
    while (done < jobs) {
      const got = await boss.fetch(queue, { batchSize: 64 });
      if (!got || got.length === 0) break;
      await boss.complete(queue, got.map((j) => j.id));
      done += got.length;
    }
  };
  await Promise.all(Array.from({ length: 4 }, lane));
  const s = (now() - start) / 1000;
  console.log(`drain jobs=${done} lanes=4 batch=64 seconds=${s.toFixed(3)} rate=${Math.round(done / s)}`);
}

async function lateness(jobs, spread) {
  // Due times spread evenly over `spread` seconds, starting 3 s from now so
  // that the inserts are done before the first is due.
  const base = Date.now() + 3000;
  const batch = [];
  for (let i = 0; i < jobs; ++i) {
    const due = base + Math.floor((i * spread * 1000) / jobs);
    batch.push({ data: { due }, startAfter: new Date(due) });
  }
  for (let i = 0; i < batch.length; i += 1000) await boss.insert(queue, batch.slice(i, i + 1000));
  const late = [];
  let done;
  const all = new Promise((resolve) => (done = resolve));
  // Four workers taking up to 1,000 jobs a poll: more than the 2,000 jobs/s due,
  // so the polling interval, not the workers, sets the lateness.
  for (let w = 0; w < 4; ++w) {
    await boss.work(queue, { batchSize: 1000, pollingIntervalSeconds: 0.5 }, async (got) => {
      const t = Date.now();
      for (const job of got) late.push(t - job.data.due);
      if (late.length >= jobs) done();
    });
  }
  const deadline = setTimeout(() => done(), (spread + 60) * 1000);
  await all;
  clearTimeout(deadline);
  printLateness(jobs, late);
}

try {
  if (mode === 'insert') await insert(Number(a1 ?? 100000));
  else if (mode === 'send') await send(Number(a1 ?? 20000));
  else if (mode === 'drain') await drain(Number(a1 ?? 50000));
  else if (mode === 'lateness') await lateness(Number(a1 ?? 20000), Number(a2 ?? 10));
  else throw new Error(`unknown mode ${mode}`);
} finally {
  await boss.deleteQueue(queue);
  await boss.stop({ graceful: false, wait: true });
}
