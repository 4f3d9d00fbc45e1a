// Client: HTTP calls to delayd's API for delayctl, one libcurl handle per
// call, with the token and a deadline; never follows redirects.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace delayctl {

struct Reply {
  long status = 0;    // 0: no answer (error says why)
  std::string body;   // as sent by the server
  std::string error;  // transport failure
  // Set when the answer is not one delayd's API gives (HTML from another
  // server, a proxy's error page, JSON of another shape): why, naming the
  // server. Every command then exits 6 (kUnavailable) and prints nothing else.
  std::string not_delayd;
  std::string server;  // who answered: the --server address
  nlohmann::json json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// PEM files for an https:// server: the CA to trust instead of the
// system's, and a client certificate and key for a server that asks (mTLS).
struct ClientTls {
  std::string cacert;
  std::string cert;
  std::string key;
};

class Client {
 public:
  // `server`: "http://127.0.0.1:8080"; `token` empty: none.
  Client(std::string server, std::string token, long timeout_ms, ClientTls tls = {});
  Reply Call(const std::string& method, const std::string& path,
             const std::string& body = "") const;

 private:
  std::string server_;
  std::string token_;
  long timeout_ms_;
  ClientTls tls_;
};

// "a b/c" -> "a%20b%2Fc": a path segment or query value.
std::string Escape(const std::string& s);

}  // namespace delayctl
