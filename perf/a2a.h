// `pact-perf a2a`: all-to-all steps through the transfer engine's groups, N engines in one
// process over loopback, every received chunk checked byte for byte.
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

// Adds the `a2a` subcommand; when it runs, *exit_code gets the process exit status.
void addA2aCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
