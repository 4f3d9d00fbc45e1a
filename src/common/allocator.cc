#include "common/allocator.h"

#include <cstddef>

// jemalloc's control interface, weak so that this file links with any
// allocator: the symbol is there only when jemalloc is (linked or preloaded).
extern "C" int mallctl(const char* name, void* oldp, size_t* oldlenp, void* newp, size_t newlen)
    __attribute__((weak));

namespace delayd {

std::string MemoryAllocator() {
  if (mallctl == nullptr) return "system";
  const char* version = nullptr;
  size_t len = sizeof version;
  if (mallctl("version", &version, &len, nullptr, 0) != 0 || version == nullptr) return "jemalloc";
  return std::string("jemalloc ") + version;
}

}  // namespace delayd
