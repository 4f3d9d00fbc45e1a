#include "support/pg.h"

#include <gtest/gtest.h>
#include <libpq-fe.h>

namespace delayd::testing {

std::vector<std::vector<std::string>> Query(const std::string& uri, const std::string& sql) {
  std::vector<std::vector<std::string>> out;
  PGconn* conn = PQconnectdb(uri.c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    ADD_FAILURE() << PQerrorMessage(conn);
    PQfinish(conn);
    return out;
  }
  PGresult* r = PQexec(conn, sql.c_str());
  if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK) {
    ADD_FAILURE() << sql << ": " << PQresultErrorMessage(r);
  } else {
    for (int i = 0; i < PQntuples(r); ++i) {
      std::vector<std::string> row;
      for (int c = 0; c < PQnfields(r); ++c) row.emplace_back(PQgetvalue(r, i, c));
      out.push_back(std::move(row));
    }
  }
  PQclear(r);
  PQfinish(conn);
  return out;
}

}  // namespace delayd::testing
