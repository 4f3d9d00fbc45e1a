// The SQLite store's schema (the twin of postgres/pg_schema.h): its tables
// and indexes, made or brought up to date when a database is opened.
#pragma once

#include <sqlite3.h>

#include "common/status.h"

namespace delayd::store::sqlite {

// Creates what is missing of the schema on `db`: the tables, the columns
// added since the first release, and the indexes. A database of any
// earlier version keeps its rows.
Status MakeSchema(sqlite3* db);

}  // namespace delayd::store::sqlite
