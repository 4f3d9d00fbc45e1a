#include "support/process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "store/testing/pg_test_db.h"
#include "support/client.h"

namespace delayd::testing {

Process::~Process() {
  if (pid_ > 0) Stop(SIGKILL);
}

void Process::Start(const std::vector<std::string>& argv, const std::string& log_path,
                    const std::vector<std::string>& env) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + log_path);
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const std::string& e : env) ::putenv(const_cast<char*>(e.c_str()));
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(fd);
  if (pid_ < 0) throw std::runtime_error("fork failed");
}

int Process::Stop(int signo, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return -1;
  ::kill(pid_, signo);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pid_ = -1;
  return status;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

ThreadNames ThreadNamesOf(pid_t pid) {
  ThreadNames names;
  const std::string task = "/proc/" + std::to_string(pid) + "/task/";
  for (const auto& entry : std::filesystem::directory_iterator(task)) {
    std::string comm;
    std::getline(std::ifstream(entry.path() / "comm"), comm);
    names.all.insert(comm);
    if (entry.path().filename() == std::to_string(pid)) names.first = comm;
  }
  return names;
}

std::pair<int, std::string> RefusedStart(const std::vector<std::string>& args) {
  const std::string dir = MakeTempDir("delayd-refused");
  std::vector<std::string> argv = {DelaydBin()};
  argv.insert(argv.end(), args.begin(), args.end());
  Process p;
  p.Start(argv, dir + ".log");
  const int status = p.Stop(0, std::chrono::seconds(20));  // signal 0: only waits for it to end
  return {status, ReadFile(dir + ".log")};
}

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

long RssKib(pid_t pid) {
  std::string status = ReadFile("/proc/" + std::to_string(pid) + "/status");
  size_t at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::stol(status.substr(at + 6));
}

std::string AsanOptions(const std::string& extra) {
  const char* inherited = std::getenv("ASAN_OPTIONS");
  return std::string("ASAN_OPTIONS=") + (inherited ? std::string(inherited) + ":" : "") + extra;
}

std::string AsanSmallQuarantine() { return AsanOptions("quarantine_size_mb=8"); }

namespace {

// The directories MakeTempDir made, removed with the servers' logs beside
// them when the test process ends (every server is stopped by then), unless
// DELAYD_KEEP_TEST_DIRS is set for a look at them.
class TempDirs {
 public:
  ~TempDirs() {
    if (std::getenv("DELAYD_KEEP_TEST_DIRS") != nullptr) return;
    std::error_code ec;
    for (const std::string& d : dirs_) {
      std::filesystem::remove_all(d, ec);
      std::filesystem::remove(d + ".log", ec);
    }
  }
  void Add(const std::string& dir) {
    std::lock_guard lock(mu_);
    dirs_.push_back(dir);
  }

 private:
  std::mutex mu_;
  std::vector<std::string> dirs_;
};

TempDirs& Made() {
  static TempDirs dirs;
  return dirs;
}

}  // namespace

std::string MakeTempDir(const std::string& prefix) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  Made().Add(tmpl);
  return tmpl;
}

std::string DelaydBin() {
  const char* other = std::getenv("DELAYD_TEST_BIN");
  return other != nullptr && *other != '\0' ? other : DELAYD_BIN;
}

bool DelaydServer::OnPostgres() { return std::getenv("DELAYD_TEST_PG_FILE") != nullptr; }

std::string DelaydServer::store_uri() const { return db_ ? db_->uri() : store_uri_; }

DelaydServer::DelaydServer(std::string data_dir, std::vector<std::string> extra,
                           std::vector<std::string> env)
    : data_dir_(std::move(data_dir)), extra_(std::move(extra)), env_(std::move(env)) {
  log_path_ = data_dir_ + ".log";
  if (OnPostgres()) {
    db_ = std::make_unique<store::testing::PgTestDb>();
    if (db_->uri().empty()) throw std::runtime_error(db_->error());
  }
  Launch();
}

DelaydServer::~DelaydServer() {
  if (process_.running()) process_.Stop(SIGKILL);
}

std::unique_ptr<DelaydServer> DelaydServer::Node(const std::string& store_uri,
                                                 std::vector<std::string> extra) {
  auto node = std::unique_ptr<DelaydServer>(new DelaydServer());
  node->data_dir_ = MakeTempDir("delayd-node");
  node->log_path_ = node->data_dir_ + ".log";
  node->store_uri_ = store_uri;
  node->extra_ = {"--cluster"};
  node->extra_.insert(node->extra_.end(), extra.begin(), extra.end());
  node->Launch();
  return node;
}

void DelaydServer::Launch() {
  std::vector<std::string> argv = {DelaydBin(),   "--data-dir", data_dir_,    "--beanstalk",
                                   "127.0.0.1:0", "--http",     "127.0.0.1:0"};
  if (db_ || !store_uri_.empty()) {
    argv.push_back("--store");
    argv.push_back(db_ ? db_->uri() : store_uri_);
  }
  argv.insert(argv.end(), extra_.begin(), extra_.end());
  const size_t log_start = ReadFile(log_path_).size();
  process_.Start(argv, log_path_, env_);
  ++starts_;
  static const std::regex kListening(
      R"(listening.* beanstalk=127\.0\.0\.1:(\d+).* http=127\.0\.0\.1:(\d+))");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string text = ReadFile(log_path_).substr(log_start);
    std::smatch m;
    if (std::regex_search(text, m, kListening)) {
      port_ = std::stoi(m[1]);
      http_port_ = std::stoi(m[2]);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  throw std::runtime_error("delayd did not start; log:\n" + ReadFile(log_path_));
}

void DelaydServer::Restart() {
  if (process_.running()) process_.Stop(SIGTERM);
  Launch();
}

int DelaydServer::Kill9() { return process_.Stop(SIGKILL); }
int DelaydServer::Terminate() { return process_.Stop(SIGTERM); }

bool BeanstalkdServer::available() { return ::access("/usr/bin/beanstalkd", X_OK) == 0; }

BeanstalkdServer::BeanstalkdServer(std::vector<std::string> extra) {
  port_ = FreePort();
  std::vector<std::string> argv = {"/usr/bin/beanstalkd", "-l", "127.0.0.1", "-p",
                                   std::to_string(port_)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  process_.Start(argv, "/dev/null");
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      Client probe(port_);
      return;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  throw std::runtime_error("beanstalkd did not start");
}

}  // namespace delayd::testing
