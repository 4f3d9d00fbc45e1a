#include "protocol/beanstalk/replies.h"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

namespace delayd::beanstalk {

std::string_view StatusReply(const Status& s, std::string_view ok) {
  switch (s.code()) {
    case StatusCode::kOk:
      return ok;
    case StatusCode::kNotFound:
    case StatusCode::kConflict:  // beanstalkd: a job in the wrong state is not found
      return reply::kNotFound;
    case StatusCode::kUnavailable:
    case StatusCode::kFenced:  // this node no longer owns the shard: another node will
      return reply::kDraining;
    case StatusCode::kNoSpace:  // as beanstalkd when its binlog cannot reserve space
      return reply::kOutOfMemory;
    default:
      return reply::kInternalError;
  }
}

std::string JobReply(std::string_view word, uint64_t id, const std::string& body) {
  std::string out = fmt::format("{} {} {}\r\n", word, id, body.size());
  out.reserve(out.size() + body.size() + 2);
  out += body;
  out += "\r\n";
  return out;
}

std::string YamlReply(const std::string& yaml) {
  return fmt::format("OK {}\r\n{}\r\n", yaml.size(), yaml);
}

std::string TubeListYaml(const std::vector<std::string>& names) {
  std::string out = "---\n";
  for (const auto& n : names) fmt::format_to(std::back_inserter(out), "- {}\n", n);
  return out;
}

std::string JobStatsYaml(const engine::JobStats& s) {
  return fmt::format(
      "---\nid: {}\ntube: {}\nstate: {}\npri: {}\nage: {}\ndelay: {}\nttr: {}\ntime-left: {}\n"
      "file: 0\nreserves: {}\ntimeouts: {}\nreleases: {}\nburies: {}\nkicks: {}\n",
      s.id, s.tube, engine::StateName(s.state), s.priority, s.age_s, s.delay_s, s.ttr_s,
      s.time_left_s, s.counters.reserves, s.counters.timeouts, s.counters.releases,
      s.counters.buries, s.counters.kicks);
}

std::string TubeStatsYaml(const engine::TubeStats& s) {
  return fmt::format(
      "---\nname: {}\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\n"
      "current-jobs-reserved: {}\ncurrent-jobs-delayed: {}\ncurrent-jobs-buried: {}\n"
      "total-jobs: {}\ncurrent-using: {}\ncurrent-watching: {}\ncurrent-waiting: {}\n"
      "cmd-delete: {}\ncmd-pause-tube: {}\npause: {}\npause-time-left: {}\n",
      s.name, s.urgent, s.ready, s.reserved, s.delayed, s.buried, s.total_jobs, s.using_count,
      s.watching_count, s.waiting, s.deletes, s.pauses, s.pause_s, s.pause_left_s);
}

std::string ServerStatsYaml(const engine::EngineStats& e, const ServerCounters& c,
                            const ProcessInfo& p, int64_t now_steady_us) {
  auto op = [&](Op o) { return c.ops[static_cast<size_t>(o)]; };
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  std::string out;
  out.reserve(1200);
  auto it = std::back_inserter(out);
  fmt::format_to(it,
                 "---\ncurrent-jobs-urgent: {}\ncurrent-jobs-ready: {}\ncurrent-jobs-reserved: {}\n"
                 "current-jobs-delayed: {}\ncurrent-jobs-buried: {}\n",
                 e.urgent, e.ready, e.reserved, e.delayed, e.buried);
  fmt::format_to(it,
                 "cmd-put: {}\ncmd-peek: {}\ncmd-peek-ready: {}\ncmd-peek-delayed: {}\n"
                 "cmd-peek-buried: {}\ncmd-reserve: {}\ncmd-reserve-with-timeout: {}\n"
                 "cmd-delete: {}\ncmd-release: {}\ncmd-use: {}\ncmd-watch: {}\ncmd-ignore: {}\n"
                 "cmd-bury: {}\ncmd-kick: {}\ncmd-touch: {}\ncmd-stats: {}\ncmd-stats-job: {}\n"
                 "cmd-stats-tube: {}\ncmd-list-tubes: {}\ncmd-list-tube-used: {}\n"
                 "cmd-list-tubes-watched: {}\ncmd-pause-tube: {}\n",
                 op(Op::kPut), op(Op::kPeek), op(Op::kPeekReady), op(Op::kPeekDelayed),
                 op(Op::kPeekBuried), op(Op::kReserve), op(Op::kReserveWithTimeout),
                 op(Op::kDelete), op(Op::kRelease), op(Op::kUse), op(Op::kWatch), op(Op::kIgnore),
                 op(Op::kBury), op(Op::kKick), op(Op::kTouch), op(Op::kStats), op(Op::kStatsJob),
                 op(Op::kStatsTube), op(Op::kListTubes), op(Op::kListTubeUsed),
                 op(Op::kListTubesWatched), op(Op::kPauseTube));
  fmt::format_to(it,
                 "job-timeouts: {}\ntotal-jobs: {}\nmax-job-size: {}\ncurrent-tubes: {}\n"
                 "current-connections: {}\ncurrent-producers: {}\ncurrent-workers: {}\n"
                 "current-waiting: {}\ntotal-connections: {}\npid: {}\nversion: \"{}\"\n"
                 "rusage-utime: {}.{:06}\nrusage-stime: {}.{:06}\nuptime: {}\n",
                 e.job_timeouts, e.total_jobs, p.max_job_size, e.tubes, c.connections, c.producers,
                 c.workers, e.waiting, c.total_connections, ::getpid(), p.version,
                 ru.ru_utime.tv_sec, ru.ru_utime.tv_usec, ru.ru_stime.tv_sec, ru.ru_stime.tv_usec,
                 (now_steady_us - p.started_us) / 1'000'000);
  // delayd has no binlog files; these keys stay for clients that read them,
  // and binlog-records-written counts store writes.
  fmt::format_to(it,
                 "binlog-oldest-index: 0\nbinlog-current-index: 0\nbinlog-records-migrated: 0\n"
                 "binlog-records-written: {}\nbinlog-max-size: 10485760\ndraining: {}\nid: {}\n"
                 "hostname: {}\nos: {}\nplatform: {}\n",
                 c.store_writes, e.draining ? "true" : "false", p.instance_id, p.hostname, p.os,
                 p.platform);
  return out;
}

}  // namespace delayd::beanstalk
