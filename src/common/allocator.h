// Which memory allocator this process runs on, as the operator sees it in
// /metrics (delayd_info) and the log at start.
//
// The delayd binary links jemalloc (doc/operations.md, "Sizing"): the push
// path allocates and frees a few dozen small blocks a job on the event loop
// and the store's writer, and glibc's malloc spent a third of the loop's
// time on them (bench/README.md, "Kafka at 100k jobs/s"). A sanitizer build
// keeps the sanitizer's own allocator, and the tests' binaries glibc's.
#pragma once

#include <string>

namespace delayd {

// "jemalloc 5.3.0-0-g54eaed1d..." when jemalloc serves malloc, else "system".
std::string MemoryAllocator();

}  // namespace delayd
