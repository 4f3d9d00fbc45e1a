#include "delivery/http_client.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <system_error>

#include "common/thread_name.h"
#include "common/version.h"

namespace delayd::delivery {

namespace {
// Bytes of a failed response's body kept as its error excerpt.
constexpr size_t kExcerptBytes = 256;
// Bytes of a response's body read at most. The status decides an attempt,
// so a longer body is not read to its end: the transfer stops, the
// connection is closed, and a target that answers megabytes takes no more
// of the client thread than one that answers "ok".
constexpr size_t kMaxBodyBytes = 64 << 10;

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
  const TargetPolicy* policy = nullptr;
  std::string host;     // the URL's, for the policy's name rules
  std::string refused;  // why the policy refused a connection; empty: it did not
  OutResult result;
  std::string response_excerpt;
  size_t body_bytes = 0;
  bool body_cut = false;  // more than kMaxBodyBytes came; the rest was not read
  curl_slist* headers = nullptr;
  int64_t started_ms = 0;
  char error[CURL_ERROR_SIZE] = {0};

  ~Transfer() { curl_slist_free_all(headers); }

  static size_t OnBody(char* data, size_t size, size_t n, void* self) {
    auto* t = static_cast<Transfer*>(self);
    size_t bytes = size * n;
    if (t->response_excerpt.size() < kExcerptBytes) {
      t->response_excerpt.append(data, std::min(bytes, kExcerptBytes - t->response_excerpt.size()));
    }
    t->body_bytes += bytes;
    if (t->body_bytes > kMaxBodyBytes) {
      t->body_cut = true;
      return CURL_WRITEFUNC_ERROR;  // ends the transfer with CURLE_WRITE_ERROR
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
  // Every connection curl opens, the first and any later one (DNS may have
  // changed), is checked against the resolved address.
  static curl_socket_t OnOpenSocket(void* self, curlsocktype purpose, curl_sockaddr* address) {
    auto* t = static_cast<Transfer*>(self);
    if (purpose == CURLSOCKTYPE_IPCXN) {
      Status s = t->policy->CheckAddress(t->host, &address->addr);
      if (!s.ok()) {
        t->refused = s.message();
        return CURL_SOCKET_BAD;
      }
    }
    return socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  }
};

HttpClient::HttpClient(Executor executor, size_t max_connections, TargetPolicy policy)
    : executor_(std::move(executor)), policy_(std::move(policy)) {
  static CurlGlobal global;
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (epoll_fd_ < 0 || wake_fd_ < 0)
    throw std::system_error(errno, std::generic_category(), "epoll");
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = wake_fd_;
  epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);
  multi_ = curl_multi_init();
  // No per-host limit inside curl: the dispatcher's caps bound concurrency,
  // and curl's own queue of transfers waiting for a connection measured
  // pathological (throughput fell from 25k to 12k deliveries/s once a
  // burst queued ~800 there). The idle-connection cache is sized so that
  // connections in use are kept rather than closed and reopened.
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
  curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(max_connections));
  curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &HttpClient::OnSocket);
  curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
  curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &HttpClient::OnTimer);
  curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
  thread_ = StartNamedThread("http-client", [this] { Loop(); });
}

HttpClient::~HttpClient() {
  Stop();
  for (auto& [e, t] : active_) {
    curl_multi_remove_handle(multi_, e);
    curl_easy_cleanup(e);
  }
  for (void* e : idle_) curl_easy_cleanup(e);
  curl_multi_cleanup(multi_);
  close(wake_fd_);
  close(epoll_fd_);
}

void HttpClient::Wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof one);
}

void HttpClient::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_ && !thread_.joinable()) return;
    stopping_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
}

void HttpClient::Send(OutRequest request, Callback done) {
  auto t = std::make_unique<Transfer>();
  t->request = std::move(request);
  t->done = std::move(done);
  bool was_empty;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    was_empty = queue_.empty();
    queue_.push_back(std::move(t));
  }
  // The thread takes the whole queue at once, so only the first request
  // since it last looked needs to wake it.
  if (was_empty) Wake();
}

int HttpClient::OnSocket(void* /*easy*/, int fd, int what, void* self, void* socketp) {
  auto* client = static_cast<HttpClient*>(self);
  if (what == CURL_POLL_REMOVE) {
    // curl forgets the socket's pointer with it, so a reused fd starts over.
    epoll_ctl(client->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    return 0;
  }
  epoll_event ev{};
  ev.events = ((what & CURL_POLL_IN) ? EPOLLIN : 0u) | ((what & CURL_POLL_OUT) ? EPOLLOUT : 0u);
  ev.data.fd = fd;
  if (socketp != nullptr) {
    epoll_ctl(client->epoll_fd_, EPOLL_CTL_MOD, fd, &ev);
  } else {
    epoll_ctl(client->epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    curl_multi_assign(client->multi_, fd, client);  // marks it as in the epoll set
  }
  return 0;
}

int HttpClient::OnTimer(void* /*multi*/, long timeout_ms, void* self) {
  static_cast<HttpClient*>(self)->timer_due_ms_ = timeout_ms < 0 ? -1 : SteadyMs() + timeout_ms;
  return 0;
}

void HttpClient::Start(std::unique_ptr<Transfer> t) {
  CURL* e;
  if (idle_.empty()) {
    e = curl_easy_init();
  } else {
    e = idle_.back();
    idle_.pop_back();
    curl_easy_reset(e);
  }
  const OutRequest& r = t->request;
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
  curl_easy_setopt(e, CURLOPT_USERAGENT, kUserAgent);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error);
  t->policy = &policy_;
  t->host = TargetPolicy::HostOf(r.url);
  curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &Transfer::OnOpenSocket);
  // Straight to the target, never through a proxy from the environment: a
  // proxy's address would be all the policy saw.
  curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, t.get());
  t->started_ms = SteadyMs();
  curl_multi_add_handle(multi_, e);  // sets curl's timer to start the transfer
  active_.emplace(e, std::move(t));
}

void HttpClient::Loop() {
  std::vector<epoll_event> events(256);
  for (;;) {
    std::deque<std::unique_ptr<Transfer>> fresh;
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
      fresh.swap(queue_);
    }
    for (auto& t : fresh) Start(std::move(t));

    int wait_ms = 1000;
    if (timer_due_ms_ >= 0)
      wait_ms = static_cast<int>(std::clamp<int64_t>(timer_due_ms_ - SteadyMs(), 0, 1000));
    const int n = epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), wait_ms);
    int running = 0;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == wake_fd_) {
        uint64_t count;
        (void)!read(wake_fd_, &count, sizeof count);
        continue;
      }
      const uint32_t ev = events[i].events;
      const int mask = ((ev & EPOLLIN) ? CURL_CSELECT_IN : 0) |
                       ((ev & EPOLLOUT) ? CURL_CSELECT_OUT : 0) |
                       ((ev & (EPOLLERR | EPOLLHUP)) ? CURL_CSELECT_ERR : 0);
      curl_multi_socket_action(multi_, fd, mask, &running);
    }
    if (timer_due_ms_ >= 0 && SteadyMs() >= timer_due_ms_) {
      timer_due_ms_ = -1;  // before the call: curl may set the next one in it
      curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    }
    Collect();
  }
}

void HttpClient::Collect() {
  std::vector<std::unique_ptr<Transfer>> finished;
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    CURL* e = msg->easy_handle;
    auto it = active_.find(e);
    std::unique_ptr<Transfer> t = std::move(it->second);
    active_.erase(it);
    OutResult& res = t->result;
    res.duration_ms = SteadyMs() - t->started_ms;
    CURLcode code = msg->data.result;
    if (code == CURLE_OK || (code == CURLE_WRITE_ERROR && t->body_cut)) {
      long status = 0;
      curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
      res.status = static_cast<int>(status);
      if (status < 200 || status >= 300)
        res.error = "HTTP " + std::to_string(status) + ": " + t->response_excerpt;
    } else {
      res.timed_out = code == CURLE_OPERATION_TIMEDOUT;
      res.error = !t->refused.empty() ? "refused by the target policy: " + t->refused
                  : t->error[0]       ? t->error
                                      : curl_easy_strerror(code);
    }
    curl_multi_remove_handle(multi_, e);
    idle_.push_back(e);
    finished.push_back(std::move(t));
  }
  if (!finished.empty()) {
    executor_(
        [batch = std::make_shared<std::vector<std::unique_ptr<Transfer>>>(std::move(finished))] {
          for (auto& t : *batch) t->done(std::move(t->result));
        });
  }
}

}  // namespace delayd::delivery
