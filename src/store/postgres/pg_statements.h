// The SQL PgStore prepares on each of its connections: every statement by
// name, with its parameters' types. What the cluster's statements lock and
// announce is told beside each (doc/cluster.md).
#pragma once

#include <string>
#include <vector>

#include "store/postgres/pg_conn.h"

namespace delayd::store::pg {

struct Statement {
  const char* name;
  std::string sql;
  std::vector<Oid> types;
};

// Every statement, prepared on each connection (each uses its own few).
std::vector<Statement> Statements();

// "SELECT <columns> <rest>".
std::string Select(const char* columns, const char* rest);

}  // namespace delayd::store::pg
