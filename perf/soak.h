// `pact-perf soak`: mixed plugin and engine traffic with faults on for minutes, reporting RSS,
// open registrations and counters every interval (docs/reliability.md has a 30-minute run).
#pragma once

namespace CLI {
class App;
}

namespace pact::perf {

void addSoakCommand(CLI::App& app, int* exit_code);

}  // namespace pact::perf
