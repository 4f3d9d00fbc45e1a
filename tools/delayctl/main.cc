// delayctl: a command-line client of delayd's HTTP API for operators and
// scripts. Every command has --help; exit codes are in output.h and the
// README ("delayctl").
#include <curl/curl.h>

#include <cstdlib>
#include <iostream>

#include "commands.h"

namespace {

// Every command path ("", " bulk", " bulk retry") and the words that may
// follow it: its subcommands and options.
void Walk(const CLI::App* app, const std::string& path,
          std::vector<std::pair<std::string, std::string>>& out) {
  std::string words;
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    words += sub->get_name() + " ";
  }
  for (const CLI::Option* o : app->get_options()) {
    for (const std::string& n : o->get_lnames()) words += "--" + n + " ";
  }
  out.emplace_back(path, words);
  for (const CLI::App* sub : app->get_subcommands([](const CLI::App*) { return true; })) {
    Walk(sub, path + " " + sub->get_name(), out);
  }
}

std::string BashCompletion(const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> paths;
  Walk(&app, "", paths);
  std::string s =
      "# bash completion for delayctl: source <(delayctl completion bash)\n"
      "_delayctl() {\n"
      "  local cur=${COMP_WORDS[COMP_CWORD]} path=\"\" w\n"
      "  for w in \"${COMP_WORDS[@]:1:COMP_CWORD-1}\"; do\n"
      "    case \"$path $w\" in\n";
  for (const auto& [path, words] : paths) {
    if (!path.empty()) s += "      \"" + path + "\") path=\"" + path + "\" ;;\n";
  }
  s += "    esac\n  done\n  local words=\"\"\n  case \"$path\" in\n";
  for (const auto& [path, words] : paths) s += "    \"" + path + "\") words=\"" + words + "\" ;;\n";
  s += "  esac\n  COMPREPLY=($(compgen -W \"$words\" -- \"$cur\"))\n}\n"
       "complete -F _delayctl delayctl\n";
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  curl_global_init(CURL_GLOBAL_DEFAULT);
  delayctl::Globals g;
  if (const char* s = std::getenv("DELAYD_SERVER")) g.server = s;
  if (const char* t = std::getenv("DELAYD_TOKEN")) g.token = t;
  CLI::App app{
      "delayctl: operate a delayd server through its HTTP API.\n"
      "Exit codes: 0 ok, 1 refused (400), 2 usage (nothing sent), 3 not found, 4 conflict,\n"
      "5 unauthorized, 6 no answer or unavailable (5xx), 7 a bulk operation stopped or failed,\n"
      "or the server is not ready."};
  app.require_subcommand(1);
  app.fallthrough();  // global options after the command too: delayctl get 1 -o json
  app.add_option("--server", g.server,
                 "The server's HTTP address (default $DELAYD_SERVER or http://127.0.0.1:8080)");
  app.add_option("--token", g.token, "The API token; better from the environment: DELAYD_TOKEN");
  app.add_option("--cacert", g.tls.cacert,
                 "For an https:// server: trust this PEM CA (default: the system's)");
  app.add_option("--cert", g.tls.cert,
                 "For a server that asks for client certificates: this PEM certificate");
  app.add_option("--key", g.tls.key, "The PEM key of --cert");
  app.add_option("--output,-o", g.output, "table or json (the server's JSON as sent)")
      ->check(CLI::IsMember({"table", "json"}));
  app.add_option("--timeout-ms", g.timeout_ms, "Per request (default 30000)")
      ->check(CLI::Range(100L, 3'600'000L));
  delayctl::AddJobCommands(app, g);
  delayctl::AddAdminCommands(app, g);
  auto* completion = app.add_subcommand("completion", "Print a shell completion script");
  std::string shell;
  completion->add_option("shell", shell, "bash")->required()->check(CLI::IsMember({"bash"}));
  completion->callback([&] { std::cout << BashCompletion(app); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a bad command line exits 2.
    const int rc = app.exit(e);
    return rc == 0 ? 0 : delayctl::kUsage;
  } catch (const nlohmann::json::exception& e) {
    // JSON of a shape no delayd sends (a field of another type, say).
    std::cerr << "delayctl: " << g.server << " answered with JSON of a shape delayd does not send ("
              << e.what() << "): not the delayd API this delayctl knows (check --server)\n";
    return delayctl::kUnavailable;
  }
  return g.rc;
}
