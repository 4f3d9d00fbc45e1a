#include "client.h"

#include <curl/curl.h>

#include <cctype>

#include "common/percent_encoding.h"

namespace delayctl {

namespace {

size_t Append(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

// Why `r` is not an answer of delayd's API, or "": delayd answers every
// route a client calls with JSON (application/json, or problem+json for an
// error) that is an object or an array, or with 204 and nothing.
std::string NotDelayd(const Reply& r, std::string type, const std::string& server) {
  type = type.substr(0, type.find(';'));
  while (!type.empty() && type.back() == ' ') type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (r.status == 204 && r.body.empty()) return "";
  std::string why;
  if (type != "application/json" && type != "application/problem+json") {
    why = "Content-Type " + (type.empty() ? std::string("(none)") : type);
  } else {
    const nlohmann::json j = r.json();
    if (!j.is_object() && !j.is_array()) why = "a body that is not a JSON object";
  }
  if (why.empty()) return "";
  return server + " is not delayd, or not its API: it answered HTTP " + std::to_string(r.status) +
         " with " + why + " (check --server or DELAYD_SERVER)";
}

}  // namespace

Client::Client(std::string server, std::string token, long timeout_ms, ClientTls tls)
    : server_(std::move(server)),
      token_(std::move(token)),
      timeout_ms_(timeout_ms),
      tls_(std::move(tls)) {
  while (!server_.empty() && server_.back() == '/') server_.pop_back();
}

Reply Client::Call(const std::string& method, const std::string& path,
                   const std::string& body) const {
  Reply r;
  r.server = server_;
  CURL* curl = curl_easy_init();
  if (curl == nullptr) {
    r.error = "cannot start libcurl";
    return r;
  }
  const std::string url = server_ + path;
  curl_slist* headers = nullptr;
  headers = curl_slist_append(headers, "Accept: application/json");
  if (!body.empty()) headers = curl_slist_append(headers, "Content-Type: application/json");
  const std::string auth = "Authorization: Bearer " + token_;
  if (!token_.empty()) headers = curl_slist_append(headers, auth.c_str());
  char err[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (!body.empty() || method == "POST" || method == "PUT" || method == "PATCH") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  }
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms_);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, std::min(timeout_ms_, 5000L));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  if (!tls_.cacert.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, tls_.cacert.c_str());
  if (!tls_.cert.empty()) curl_easy_setopt(curl, CURLOPT_SSLCERT, tls_.cert.c_str());
  if (!tls_.key.empty()) curl_easy_setopt(curl, CURLOPT_SSLKEY, tls_.key.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  CURLcode rc = curl_easy_perform(curl);
  if (rc != CURLE_OK) {
    r.error = err[0] != '\0' ? err : curl_easy_strerror(rc);
  } else {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &r.status);
    char* type = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type);
    r.not_delayd = NotDelayd(r, type != nullptr ? type : "", server_);
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return r;
}

std::string Escape(const std::string& s) { return delayd::PercentEncode(s); }

}  // namespace delayctl
