#include "delivery/http_client.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <unordered_map>

namespace delayd::delivery {

namespace {
// Bytes of a failed response's body kept as its error excerpt.
constexpr size_t kExcerptBytes = 256;

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct CurlGlobal {
  CurlGlobal() { curl_global_init(CURL_GLOBAL_DEFAULT); }
};
}  // namespace

struct HttpClient::Transfer {
  OutRequest request;
  Callback done;
  OutResult result;
  std::string response_excerpt;
  curl_slist* headers = nullptr;
  CURL* easy = nullptr;
  int64_t started_ms = 0;
  char error[CURL_ERROR_SIZE] = {0};

  ~Transfer() { curl_slist_free_all(headers); }

  static size_t OnBody(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    size_t bytes = size * n;
    if (t->response_excerpt.size() < kExcerptBytes) {
      t->response_excerpt.append(data, std::min(bytes, kExcerptBytes - t->response_excerpt.size()));
    }
    return bytes;
  }
  static size_t OnHeader(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    std::string_view line(data, size * n);
    constexpr std::string_view kName = "retry-after:";
    if (line.size() > kName.size() && strncasecmp(line.data(), kName.data(), kName.size()) == 0) {
      t->result.retry_after = std::string(line.substr(kName.size()));
    }
    return size * n;
  }
};

HttpClient::HttpClient(Executor executor, size_t max_host_connections)
    : executor_(std::move(executor)), max_host_connections_(max_host_connections) {
  static CurlGlobal global;
  multi_ = curl_multi_init();
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(max_host_connections_));
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(max_host_connections_));
  thread_ = std::thread([this] { Loop(); });
}

HttpClient::~HttpClient() {
  Stop();
  curl_multi_cleanup(multi_);
}

void HttpClient::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  curl_multi_wakeup(multi_);
  if (thread_.joinable()) thread_.join();
}

void HttpClient::Send(OutRequest request, Callback done) {
  auto t = std::make_unique<Transfer>();
  t->request = std::move(request);
  t->done = std::move(done);
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    queue_.push_back(std::move(t));
  }
  curl_multi_wakeup(multi_);
}

void HttpClient::Loop() {
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active;
  std::vector<CURL*> idle;  // finished handles, kept for their connection state
  for (;;) {
    std::deque<std::unique_ptr<Transfer>> fresh;
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      fresh.swap(queue_);
    }
    for (auto& t : fresh) {
      CURL* e;
      if (idle.empty()) {
        e = curl_easy_init();
      } else {
        e = idle.back();
        idle.pop_back();
        curl_easy_reset(e);
      }
      const OutRequest& r = t->request;
      t->easy = e;
      for (const std::string& h : r.headers) t->headers = curl_slist_append(t->headers, h.c_str());
      t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue round trip
      curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
      if (r.method != "GET") {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      }
      curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
      curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout_ms));
      curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
      curl_easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
      curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_easy_setopt(e, CURLOPT_USERAGENT, "delayd/0.1.0");
      curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::OnBody);
      curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
      curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::OnHeader);
      curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
      curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
      curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
      t->started_ms = SteadyMs();
      curl_multi_add_handle(multi_, e);
      active.emplace(e, std::move(t));
    }
    int running = 0;
    curl_multi_perform(multi_, &running);
    std::vector<std::unique_ptr<Transfer>> finished;
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* e = msg->easy_handle;
      auto it = active.find(e);
      std::unique_ptr<Transfer> t = std::move(it->second);
      active.erase(it);
      OutResult& res = t->result;
      res.duration_ms = SteadyMs() - t->started_ms;
      CURLcode code = msg->data.result;
      if (code == CURLE_OK) {
        long status = 0;
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
        res.status = static_cast<int>(status);
        if (status < 200 || status >= 300)
          res.error = "HTTP " + std::to_string(status) + ": " + t->response_excerpt;
      } else {
        res.timed_out = code == CURLE_OPERATION_TIMEDOUT;
        res.error = t->error[0] ? t->error : curl_easy_strerror(code);
      }
      curl_multi_remove_handle(multi_, e);
      idle.push_back(e);
      finished.push_back(std::move(t));
    }
    if (!finished.empty()) {
      executor_(
          [batch = std::make_shared<std::vector<std::unique_ptr<Transfer>>>(std::move(finished))] {
            for (auto& t : *batch) t->done(std::move(t->result));
          });
    }
    curl_multi_poll(multi_, nullptr, 0, 1000, nullptr);
  }
  for (auto& [e, t] : active) {
    curl_multi_remove_handle(multi_, e);
    curl_easy_cleanup(e);
  }
  for (CURL* e : idle) curl_easy_cleanup(e);
}

}  // namespace delayd::delivery
