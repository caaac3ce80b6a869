// One registry per process across copies of pact (telemetry/shared.h): the NCCL plugin, dlopened
// RTLD_LOCAL as NCCL does, adopts this executable's state (the executable links the core and
// exports pact_telemetry_join_v1), so its exposition holds the executable's sets; a copy of
// another build is refused by its fingerprint.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "telemetry/counters.h"
#include "telemetry/exposition.h"
#include "telemetry/shared.h"

namespace pact::telemetry {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(SharedTelemetry, ThePluginLoadedLocallyServesTheExecutablesCounters) {
  CounterSet mine(kEngineCatalog, "engine joined-by-test", {{"engine", "joined-by-test"}});
  mine.add(kCommitted, 7);
  void* plugin = dlopen(PACT_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(plugin, nullptr) << dlerror();
  auto write = reinterpret_cast<int (*)(const char*)>(dlsym(plugin, "pact_plugin_metrics_write"));
  ASSERT_NE(write, nullptr);
  const std::string path = testing::TempDir() + "/shared-telemetry.prom";
  ASSERT_EQ(write(path.c_str()), 0);
  const std::string text = slurp(path);
  const std::string sample = "pact_engine_committed_total{engine=\"joined-by-test\"} 7\n";
  EXPECT_NE(text.find(sample), std::string::npos) << "the plugin's exposition:\n" << text;
  EXPECT_FALSE(sharedIsAdopted()) << "the executable came first: its state is the process's";

  // A set the plugin's copy creates lands in the same registry: its process set, labelled with
  // the copy, through the plugin's own pact_faults_injected.
  auto faults = reinterpret_cast<uint64_t (*)()>(dlsym(plugin, "pact_faults_injected"));
  ASSERT_NE(faults, nullptr);
  EXPECT_EQ(faults(), 0u);
  EXPECT_NE(prometheusText(Registry::process()).find("{copy=\"libnccl-net-pact.so\"}"), std::string::npos);

  // The plugin leaves; what it counted is in heap memory, so the exposition still reads it.
  dlclose(plugin);
  EXPECT_NE(prometheusText(Registry::process()).find(sample), std::string::npos);
}

TEST(SharedTelemetry, ACopyOfAnotherBuildIsRefused) {
  int mismatch = 0;
  EXPECT_EQ(pact_telemetry_join_v1("pact 0.0; another compiler", &mismatch), nullptr);
  EXPECT_EQ(mismatch, 1);
}

}  // namespace
}  // namespace pact::telemetry
