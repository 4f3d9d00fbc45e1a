// delayd: entry point. Reads the configuration, starts the server, and runs
// it until SIGTERM or SIGINT.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "server/config.h"
#include "server/server.h"

int main(int argc, char** argv) {
  delayd::server::ParsedArgs args = delayd::server::ParseArgs(argc, argv);
  if (args.exit) return args.exit_code;

  auto logger = spdlog::stderr_color_mt("delayd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(args.config.log_level));
  spdlog::flush_on(spdlog::level::info);

  delayd::server::Server server(args.config);
  if (delayd::Status s = server.Start(); !s.ok()) {
    spdlog::error("cannot start: {}", s.ToString());
    return 1;
  }
  return server.Run();
}
