// Limits both broker senders keep to (doc/brokers.md).
#pragma once

#include <cstdint>

namespace delayd::brokers {

inline constexpr int64_t kSweepUs = 60'000'000;  // idle clients are looked for this often
inline constexpr int64_t kIdleUs = 300'000'000;  // a client unused this long is closed
inline constexpr int kConnectWaitMs = 10'000;    // a connection to a broker may take this long

}  // namespace delayd::brokers
