// delayd's version, named once: CMakeLists.txt's project() sets it, and the
// build passes it in as DELAYD_VERSION.
#pragma once

#ifndef DELAYD_VERSION
#error "DELAYD_VERSION is set by CMakeLists.txt"
#endif

namespace delayd {

inline constexpr const char* kVersion = DELAYD_VERSION;

// What beanstalk `stats` reports as `version`. Client libraries read it as
// beanstalkd's, to decide which commands exist (`semver.satisfies(version,
// ">= 1.8.0")` before `kick-job`), so it is a valid semantic version of the
// beanstalkd release whose protocol delayd speaks, 1.12.0, and says that it
// is delayd in its build metadata, which version comparisons ignore.
inline constexpr const char* kBeanstalkStatsVersion = "1.12.0+delayd." DELAYD_VERSION;

// The User-Agent of push deliveries and alert webhooks.
inline constexpr const char* kUserAgent = "delayd/" DELAYD_VERSION;

}  // namespace delayd
