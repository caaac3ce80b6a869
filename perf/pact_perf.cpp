// pact-perf: benchmark driver. Each scenario lives in its own file and registers one subcommand;
// main only dispatches. Scenarios: p2p and scale (net plugin), kv and a2a (transfer engine), soak
// (both), coll (N ranks, net plugin), mix (engine classes at once); more plug in the same way (addXCommand(app, &exit_code)).
#include "a2a.h"
#include "coll.h"
#include "kv.h"
#include "mix.h"
#include "p2p.h"
#include "scale.h"
#include "soak.h"
#include "version.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  // mpirun and nccl-tests users type -np N; CLI11 has single-letter short options only.
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "-np") argv[i] = const_cast<char*>("--np");
  CLI::App app{"pact-perf: benchmarks for pact and any NCCL net plugin"};
  app.require_subcommand(1, 1);
  app.set_version_flag("--version", std::function<std::string()>([] { return pact::perf::versionText("pact-perf"); }),
                       "pact's, UCX's and the ABIs' versions");
  int exit_code = 0;
  pact::perf::addP2pCommand(app, &exit_code);
  pact::perf::addKvCommand(app, &exit_code);
  pact::perf::addA2aCommand(app, &exit_code);
  pact::perf::addSoakCommand(app, &exit_code);
  pact::perf::addScaleCommand(app, &exit_code);
  pact::perf::addCollCommand(app, &exit_code);
  pact::perf::addMixCommand(app, &exit_code);
  // A first word that names no mode: say which word, and what the modes are (CLI11 only says a
  // subcommand is required).
  std::string modes;
  bool known = false;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    modes += (modes.empty() ? "" : ", ") + sub->get_name();
    known = known || (argc > 1 && sub->get_name() == argv[1]);
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::fprintf(stderr, "pact-perf: unknown mode '%s'; the modes are %s (pact-perf MODE --help)\n", argv[1],
                 modes.c_str());
    return 2;
  }
  CLI11_PARSE(app, argc, argv);
  return exit_code;
}
