// PACT_TRACE_FILE's writer (engine/trace_file): a transfer's state changes become one async
// track of contiguous phase spans with its key in the args, an abort an instant event, and the
// collector is bounded: past its cap the oldest engines go, counted in the file.
#include <gtest/gtest.h>

#include <unistd.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "engine/state.h"
#include "engine/trace_file.h"
#include "telemetry/timeline.h"

namespace pact::engine {
namespace {

telemetry::TraceEvent at(uint64_t ns, State s, Event e, uint64_t request = 42) {
  telemetry::TraceEvent t;
  t.timeNs = ns;
  t.key.requestId = request;
  t.key.transferId = 7;
  t.key.modelEpoch = 3;
  t.key.generation = 1;
  t.peer = 9;
  t.role = 0;  // receiver
  t.state = static_cast<uint8_t>(s);
  t.event = static_cast<uint8_t>(e);
  return t;
}

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string tempPath(const char* name) {
  return ::testing::TempDir() + name + std::to_string(getpid()) + ".json";
}

TEST(TraceFile, ATransferIsContiguousPhaseSpansAndAnAbortAnInstant) {
  const std::vector<telemetry::TraceEvent> ev = {
      at(1000, State::kAllocated, Event::kAdvertise), at(3000, State::kAdvertised, Event::kAdvertise),
      at(4000, State::kPosted, Event::kPost),         at(5000, State::kInFlight, Event::kSend),
      at(9000, State::kRemoteDone, Event::kRemoteDone), at(9500, State::kAborted, Event::kDeadline)};
  collectTrace("unit-a", ev, 1000);
  const std::string path = tempPath("pact-trace-a-");
  std::string error;
  ASSERT_TRUE(telemetry::writeTimeline(path, &error)) << error;
  const std::string text = readAll(path);
  // Each phase begins where the previous ended, named for the state it was in.
  for (const auto& [name, b, e] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {phaseName(0, 0), "1.000", "3.000"}, {"advertised, waiting for the sender", "3.000", "4.000"},
           {"posted", "4.000", "5.000"}, {"on the wire", "5.000", "9.000"}, {"landed to verified", "9.000", "9.500"}}) {
    EXPECT_NE(text.find("\"ph\":\"b\",\"name\":\"" + name + "\",\"ts\":" + b), std::string::npos) << name;
    EXPECT_NE(text.find("\"ph\":\"e\",\"name\":\"" + name + "\",\"ts\":" + e), std::string::npos) << name;
  }
  EXPECT_EQ(std::string(phaseName(0, 0)), "waiting for credit");
  EXPECT_NE(text.find("\"ph\":\"n\",\"name\":\"abort: " + std::string(eventName(Event::kDeadline)) + "\""), std::string::npos);
  EXPECT_NE(text.find("\"request_id\":42,\"transfer_id\":7,\"model_epoch\":3,\"generation\":1,\"peer\":9,\"role\":\"receiver\",\"engine\":\"unit-a\""),
            std::string::npos);
  EXPECT_NE(text.find("\"name\":\"engine unit-a\""), std::string::npos) << "the engine's track is named";
  std::remove(path.c_str());
}

TEST(TraceFile, TheCollectorKeepsTheNewestEnginesWithinItsBound) {
  // Engines of 50 one-phase transfers (102 objects each, with their metadata) under a bound of
  // 250 objects: the two oldest go.
  std::vector<telemetry::TraceEvent> ev;
  for (uint64_t r = 0; r < 50; ++r) {
    ev.push_back(at(1000 + r, State::kAllocated, Event::kAdvertise, r));
    ev.push_back(at(2000 + r, State::kAdvertised, Event::kAdvertise, r));
  }
  for (int i = 0; i < 4; ++i) collectTrace("bulk-" + std::to_string(i), ev, 250);
  const std::string path = tempPath("pact-trace-b-");
  std::string error;
  ASSERT_TRUE(telemetry::writeTimeline(path, &error)) << error;
  const std::string text = readAll(path);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex("\"sources_dropped\":([0-9]+)")));
  EXPECT_GE(std::stoi(m[1]), 2) << "the oldest engines went";
  EXPECT_NE(text.find("\"name\":\"engine bulk-3\""), std::string::npos) << "the newest stays";
  EXPECT_EQ(text.find("\"name\":\"engine bulk-0\""), std::string::npos);
  std::remove(path.c_str());
}

TEST(TraceFile, AnUnwritablePathIsAnErrorNamingIt) {
  std::string error;
  EXPECT_FALSE(telemetry::writeTimeline("/nonexistent-dir/x.json", &error));
  EXPECT_NE(error.find("/nonexistent-dir/x.json"), std::string::npos) << error;
}

}  // namespace
}  // namespace pact::engine
