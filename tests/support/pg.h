// Test support: one query against a test database, for tests that look at
// what delayd stored (cluster tests read shards and leases directly).
#pragma once

#include <string>
#include <vector>

namespace delayd::testing {

// The rows of `sql` as text values (none for a statement that returns no
// rows); a failed connection or query fails the current test and returns no
// rows.
std::vector<std::vector<std::string>> Query(const std::string& uri, const std::string& sql);

}  // namespace delayd::testing
