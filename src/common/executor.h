// Executor: runs a closure on some other thread, typically the event loop's
// (boost::asio::post behind a std::function). Components that work on threads
// of their own (the store's writer, the HTTP client) answer through one, so
// that their callbacks run where the engine lives.
#pragma once

#include <functional>

namespace delayd {

using Executor = std::function<void(std::function<void()>)>;

}  // namespace delayd
