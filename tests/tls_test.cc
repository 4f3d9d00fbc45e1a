// TLS on the HTTP API and console, and on the gRPC listener (issue 33), as
// clients meet it: curl and delayctl with a CA, plain HTTP on the TLS port,
// client certificates (mTLS), and a certificate replaced on disk and
// re-read on SIGHUP while a long poll made before stays open. Certificates
// are made per test with the openssl command (EC P-256, two days).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>

#include "support/http.h"
#include "support/process.h"

namespace delayd::testing {
namespace {

using namespace std::chrono_literals;

struct ShRun {
  int status = -1;  // the exit status
  std::string output;
};

// `command` through sh, its stdout and stderr together.
ShRun Sh(const std::string& command) {
  ShRun r;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = MakeTempDir("delayd-tls"); }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // A CA: NAME.pem and NAME.key.
  void MakeCa(const std::string& name) {
    ShRun r =
        Sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2"
           " -subj /CN=" +
           name + " -keyout " + Path(name + ".key") + " -out " + Path(name + ".pem"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  // A certificate NAME.pem (key NAME.key) with common name `cn` signed by
  // the CA `ca`; for 127.0.0.1 and localhost.
  void MakeCert(const std::string& name, const std::string& ca, const std::string& cn) {
    WriteFile(Path(name + ".ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n");
    ShRun r = Sh(
        "openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" + cn +
        " -keyout " + Path(name + ".key") + " -out " + Path(name + ".csr") +
        " && openssl x509 -req -days 2 -in " + Path(name + ".csr") + " -CA " + Path(ca + ".pem") +
        " -CAkey " + Path(ca + ".key") + " -CAcreateserial -extfile " + Path(name + ".ext") +
        " -out " + Path(name + ".pem"));
    ASSERT_EQ(r.status, 0) << r.output;
  }
  void Start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--tls-cert", Path("server.pem"), "--tls-key",
                                     Path("server.key")};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<DelaydServer>(MakeTempDir("delayd-tls-data"), args);
  }
  std::string Url(const std::string& path) const {
    return "https://127.0.0.1:" + std::to_string(server_->http_port()) + path;
  }
  // curl -sS with the server's CA and `args`: the body, then the status.
  ShRun Curl(const std::string& args, const std::string& path) {
    return Sh("curl -sS --max-time 20 -w '\\n%{http_code}' --cacert " + Path("ca.pem") + " " +
              args + " '" + Url(path) + "'");
  }
  // The subject of the certificate the server at `port` presents now.
  std::string Subject(int port) {
    ShRun r = Sh("openssl s_client -connect 127.0.0.1:" + std::to_string(port) + " -CAfile " +
                 Path("ca.pem") + " </dev/null 2>/dev/null | openssl x509 -noout -subject");
    return r.output;
  }
  std::string dir_;
  std::unique_ptr<DelaydServer> server_;
};

TEST_F(TlsTest, CurlWithTheCaReachesTheApiAndPlainHttpGetsNoAnswer) {
  MakeCa("ca");
  MakeCert("server", "ca", "delayd-one");
  Start({"--grpc", "127.0.0.1:0"});
  ShRun stats = Curl("", "/v1/stats");
  ASSERT_EQ(stats.status, 0) << stats.output << server_->log();
  EXPECT_TRUE(stats.output.ends_with("\n200")) << stats.output;
  ShRun put = Curl("-X POST -H 'Content-Type: application/json' --data '{\"body\":\"over tls\"}'",
                   "/v1/topics/tls/jobs");
  EXPECT_NE(put.output.find("\"over tls\""), std::string::npos) << put.output;
  EXPECT_TRUE(put.output.ends_with("\n201")) << put.output;
  ShRun console = Curl("", "/");
  EXPECT_TRUE(console.output.ends_with("\n200")) << "the console too";
  // delayctl, trusting the same CA.
  ShRun ctl = Sh(std::string(DELAYCTL_BIN) + " --server " + Url("") + " --cacert " +
                 Path("ca.pem") + " stats -o json");
  EXPECT_EQ(ctl.status, 0) << ctl.output;
  // Without the CA the certificate is not trusted.
  ShRun untrusted = Sh("curl -sS --max-time 20 '" + Url("/v1/stats") + "'");
  EXPECT_NE(untrusted.status, 0) << untrusted.output;
  // Plain HTTP on the TLS port: the connection closes, no answer at all.
  HttpReply plain = HttpCall(server_->http_port(), "GET", "/v1/stats");
  EXPECT_EQ(plain.status, 0) << plain.body;
  EXPECT_EQ(plain.body, "");
  // TLS older than 1.2 is refused.
  ShRun old =
      Sh("openssl s_client -tls1_1 -connect 127.0.0.1:" + std::to_string(server_->http_port()) +
         " </dev/null");
  EXPECT_NE(old.status, 0) << old.output;
  // The gRPC port speaks TLS with the same certificate.
  const std::string log = server_->log();
  const size_t at = log.rfind("grpc=127.0.0.1:");
  ASSERT_NE(at, std::string::npos) << log;
  const int grpc_port = std::stoi(log.substr(at + 15));
  EXPECT_NE(Subject(grpc_port).find("delayd-one"), std::string::npos);
  // Still serving after all that.
  EXPECT_TRUE(Curl("", "/healthz").output.ends_with("\n200"));
}

TEST_F(TlsTest, MutualTlsRefusesAClientWithoutACertificateOrWithOneOfAnotherCa) {
  MakeCa("ca");
  MakeCert("server", "ca", "delayd-one");
  MakeCa("clients");
  MakeCert("worker", "clients", "worker-1");
  MakeCa("other");
  MakeCert("stranger", "other", "worker-1");  // the same name, from another CA
  Start({"--tls-client-ca", Path("clients.pem")});
  ShRun none = Curl("", "/v1/stats");
  EXPECT_NE(none.status, 0) << "no certificate: " << none.output;
  EXPECT_FALSE(none.output.ends_with("\n200")) << none.output;
  ShRun stranger =
      Curl("--cert " + Path("stranger.pem") + " --key " + Path("stranger.key"), "/v1/stats");
  EXPECT_NE(stranger.status, 0) << "another CA's: " << stranger.output;
  EXPECT_FALSE(stranger.output.ends_with("\n200")) << stranger.output;
  ShRun worker = Curl("--cert " + Path("worker.pem") + " --key " + Path("worker.key"), "/v1/stats");
  EXPECT_EQ(worker.status, 0) << worker.output;
  EXPECT_TRUE(worker.output.ends_with("\n200")) << worker.output;
  ShRun ctl =
      Sh(std::string(DELAYCTL_BIN) + " --server " + Url("") + " --cacert " + Path("ca.pem") +
         " --cert " + Path("worker.pem") + " --key " + Path("worker.key") + " stats -o json");
  EXPECT_EQ(ctl.status, 0) << ctl.output;
}

TEST_F(TlsTest, ANewCertificateIsServedAfterSighupWhileALongPollStaysOpen) {
  MakeCa("ca");
  MakeCert("server", "ca", "delayd-first");
  MakeCert("next", "ca", "delayd-second");
  Start();
  const int port = server_->http_port();
  ASSERT_NE(Subject(port).find("delayd-first"), std::string::npos);
  // A consumer waits on a TLS connection opened before the reload.
  std::future<ShRun> poll = std::async(std::launch::async, [&] {
    return Curl("-X POST", "/v1/topics/lp/reserve?timeout_ms=30000");
  });
  ASSERT_TRUE(WaitUntil(
      [&] {
        return Curl("", "/v1/stats").output.find("\"waiting_consumers\":1") != std::string::npos;
      },
      10s))
      << Curl("", "/v1/stats").output;
  // The certificate replaced on disk, then SIGHUP.
  std::filesystem::copy_file(Path("next.pem"), Path("server.pem"),
                             std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(Path("next.key"), Path("server.key"),
                             std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(::kill(server_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitUntil(
      [&] { return server_->log().find("re-read the TLS certificate") != std::string::npos; }, 10s))
      << server_->log();
  EXPECT_NE(Subject(port).find("delayd-second"), std::string::npos);
  // The long poll is still there, and gets the job put now.
  EXPECT_EQ(poll.wait_for(0s), std::future_status::timeout) << "the long poll ended";
  ShRun put =
      Curl("-X POST -H 'Content-Type: application/json' --data '{\"body\":\"for the poll\"}'",
           "/v1/topics/lp/jobs");
  ASSERT_TRUE(put.output.ends_with("\n201")) << put.output;
  ASSERT_EQ(poll.wait_for(20s), std::future_status::ready);
  ShRun got = poll.get();
  EXPECT_EQ(got.status, 0) << got.output;
  EXPECT_NE(got.output.find("\"for the poll\""), std::string::npos) << got.output;
  EXPECT_TRUE(got.output.ends_with("\n200")) << got.output;
  // A certificate file that cannot be used keeps the one in use.
  WriteFile(Path("server.pem"), "not a certificate\n");
  const size_t logged = server_->log().size();
  ASSERT_EQ(::kill(server_->pid(), SIGHUP), 0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        return server_->log().find("kept the TLS certificate in use", logged) != std::string::npos;
      },
      10s))
      << server_->log();
  EXPECT_NE(Subject(port).find("delayd-second"), std::string::npos);
}

}  // namespace
}  // namespace delayd::testing
