// pact-perf: benchmark driver. Each scenario lives in its own file and registers one subcommand;
// main only dispatches. Scenarios: p2p (this file's only one so far); kv, a2a and soak plug in the
// same way (addXCommand(app, &exit_code)).
#include "p2p.h"

#include <CLI/CLI.hpp>

int main(int argc, char** argv) {
  CLI::App app{"pact-perf: benchmarks for pact and any NCCL net plugin"};
  app.require_subcommand(1, 1);
  int exit_code = 0;
  pact::perf::addP2pCommand(app, &exit_code);
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
