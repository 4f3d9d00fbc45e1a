// delayctl's commands, each a CLI11 subcommand whose callback sets the exit
// code. jobs.cc: submit, get, attempts, list, cancel, retry, run-now, kick,
// bulk. admin.cc: topics, timers, stats, cluster, health.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "output.h"

namespace delayctl {

struct Globals {
  std::string server = "http://127.0.0.1:8080";
  std::string token;
  std::string output = "table";
  long timeout_ms = 30'000;
  ClientTls tls;
  int rc = kOk;  // the exit code, set by the command that ran
  Ctx Make() const { return Ctx{Client(server, token, timeout_ms, tls), output == "json"}; }
};

void AddJobCommands(CLI::App& app, Globals& g);
void AddAdminCommands(CLI::App& app, Globals& g);

// A whole JSON text (validated here so that a typo fails before anything is
// sent) or the reason it is not one.
std::string CheckJson(const std::string& text, const std::string& what);
// A duration as the API takes it: an integer ("5000", "-600000") as a number
// of ms, anything else ("30m", "-2h", or digits too large for one) as text,
// for the server to accept or refuse.
nlohmann::json Millis(const std::string& text);
// The contents of `path` ("-": stdin), or nullopt when it cannot be read.
std::optional<std::string> ReadInput(const std::string& path);

}  // namespace delayctl
