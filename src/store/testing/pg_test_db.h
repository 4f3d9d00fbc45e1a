// Test support: a fresh PostgreSQL database of the test's own, on the
// server the test command starts (scripts/pg-temp, the CTest fixture
// `postgres`), which writes its URI to the file DELAYD_TEST_PG_FILE names.
#pragma once

#include <libpq-fe.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <string>

namespace delayd::store::testing {

class PgTestDb {
 public:
  // Creates database delayd_test_<pid>_<n>. On failure, error() says why
  // and uri() is empty.
  PgTestDb() {
    const char* file = std::getenv("DELAYD_TEST_PG_FILE");
    if (file == nullptr) {
      error_ =
          "DELAYD_TEST_PG_FILE is not set: run this test through ctest, whose fixture starts "
          "PostgreSQL";
      return;
    }
    std::ifstream in(file);
    std::getline(in, admin_uri_);
    if (admin_uri_.empty()) {
      error_ = std::string("no PostgreSQL URI in ") + file;
      return;
    }
    static std::atomic<int> counter{0};
    name_ = "delayd_test_" + std::to_string(::getpid()) + "_" + std::to_string(++counter);
    if (!Admin("CREATE DATABASE " + name_)) return;
    // The admin URI names database `postgres` last: the same server, this database.
    uri_ = admin_uri_.substr(0, admin_uri_.rfind('/') + 1) + name_;
  }
  ~PgTestDb() {
    if (!uri_.empty()) Admin("DROP DATABASE IF EXISTS " + name_ + " WITH (FORCE)");
  }
  PgTestDb(const PgTestDb&) = delete;
  PgTestDb& operator=(const PgTestDb&) = delete;

  const std::string& uri() const { return uri_; }
  const std::string& admin_uri() const { return admin_uri_; }
  const std::string& error() const { return error_; }

  // Runs `sql` on the test's database; false (and error()) on failure.
  bool Exec(const std::string& sql) { return Run(uri_, sql); }

 private:
  bool Admin(const std::string& sql) { return Run(admin_uri_, sql); }
  bool Run(const std::string& uri, const std::string& sql) {
    PGconn* c = PQconnectdb(uri.c_str());
    bool ok = PQstatus(c) == CONNECTION_OK;
    if (ok) {
      PGresult* r = PQexec(c, sql.c_str());
      ok = PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK;
      PQclear(r);
    }
    if (!ok) error_ = sql + ": " + PQerrorMessage(c);
    PQfinish(c);
    return ok;
  }

  std::string admin_uri_;
  std::string name_;
  std::string uri_;
  std::string error_;
};

}  // namespace delayd::store::testing
