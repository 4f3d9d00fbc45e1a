// Test support: start a server binary as a child process and stop it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace delayd::store::testing {
class PgTestDb;
}

namespace delayd::testing {

// A child process whose stderr is captured to a file.
class Process {
 public:
  Process() = default;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  // Starts `argv[0]` with `argv`; stderr (and stdout) go to `log_path`.
  // `env` ("NAME=value") is added to the environment the child inherits.
  void Start(const std::vector<std::string>& argv, const std::string& log_path,
             const std::vector<std::string>& env = {});
  // Sends `signo` and waits for exit (up to `timeout`); returns the wait status.
  int Stop(int signo, std::chrono::milliseconds timeout = std::chrono::seconds(20));
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
};

// The delayd binary the black-box tests start: the one this build made, or
// $DELAYD_TEST_BIN (to run a suite against another build, e.g. an older
// commit's, to see a test fail there).
std::string DelaydBin();

// The text of a file, or "" if it cannot be read.
std::string ReadFile(const std::string& path);
// Replaces `path`'s contents with `text`.
void WriteFile(const std::string& path, const std::string& text);

// The names a running process's threads carry (/proc/PID/task/*/comm), what
// `ps -L` and `top -H` show: its first thread's, and every thread's.
struct ThreadNames {
  std::string first;
  std::multiset<std::string> all;
};
ThreadNames ThreadNamesOf(pid_t pid);

// delayd started with `args` (after the binary) that must refuse to start:
// its exit status once it has ended (20 s at most) and its log.
std::pair<int, std::string> RefusedStart(const std::vector<std::string>& args);

// A free loopback TCP port (bound, then released).
int FreePort();

// A process's resident memory in KiB, from /proc; -1 if unknown.
long RssKib(pid_t pid);

// "ASAN_OPTIONS=<the inherited options>:<extra>", for a child's environment.
std::string AsanOptions(const std::string& extra);

// AsanOptions for a child whose memory a test measures: under ASan, freed
// memory is held in a quarantine (256 MiB by default) that counts as resident.
std::string AsanSmallQuarantine();

// A fresh empty directory under the system temp dir, removed (with
// "<dir>.log") when the test process exits; DELAYD_KEEP_TEST_DIRS=1 keeps it.
std::string MakeTempDir(const std::string& prefix);

// delayd started on ephemeral ports with its own data dir or, when the
// environment names the test PostgreSQL (DELAYD_TEST_PG_FILE, as CTest's
// postgres variants do), its own database there (store/testing/pg_test_db.h).
// A restart keeps either.
class DelaydServer {
 public:
  // Starts delayd with `--data-dir dir --beanstalk 127.0.0.1:0 --http
  // 127.0.0.1:0` (and `--store URI` on PostgreSQL) plus `extra`, and `env`
  // added to its environment, and waits (10 s at most) for the line naming
  // its ports.
  explicit DelaydServer(std::string data_dir, std::vector<std::string> extra = {},
                        std::vector<std::string> env = {});
  // A node of a cluster: delayd as above with `--store store_uri --cluster`
  // (a database the caller made, shared with the other nodes) plus `extra`.
  static std::unique_ptr<DelaydServer> Node(const std::string& store_uri,
                                            std::vector<std::string> extra = {});
  ~DelaydServer();
  void Restart();
  int Kill9();      // crash: SIGKILL
  int Terminate();  // SIGTERM; returns the wait status
  int port() const { return port_; }
  int http_port() const { return http_port_; }
  pid_t pid() const { return process_.pid(); }
  const std::string& data_dir() const { return data_dir_; }
  // Whether this server keeps its jobs in PostgreSQL.
  static bool OnPostgres();
  // The database it keeps its jobs in (a cluster node's too); "" on SQLite.
  std::string store_uri() const;
  std::string log() const { return ReadFile(log_path_); }

 private:
  DelaydServer() = default;
  void Launch();
  std::string data_dir_;
  std::unique_ptr<store::testing::PgTestDb> db_;  // on PostgreSQL
  std::string store_uri_;                         // a cluster node's (Node)
  std::vector<std::string> extra_;
  std::vector<std::string> env_;
  std::string log_path_;
  Process process_;
  int port_ = 0;
  int http_port_ = 0;
  int starts_ = 0;
};

// beanstalkd 1.12 from Debian, for side-by-side comparison; available() is
// false when the binary is missing.
class BeanstalkdServer {
 public:
  explicit BeanstalkdServer(std::vector<std::string> extra = {});
  static bool available();
  int port() const { return port_; }

 private:
  Process process_;
  int port_ = 0;
};

}  // namespace delayd::testing
