#include "engine/trace_file.h"

#include <unistd.h>

#include <cstdio>
#include <map>
#include <tuple>
#include <vector>

#include "engine/state.h"
#include "engine/transfer.h"
#include "telemetry/timeline.h"

namespace pact::engine {

const char* phaseName(uint8_t state, uint8_t role) {
  const bool receiver = role == static_cast<uint8_t>(Role::kReceiver);
  switch (static_cast<State>(state)) {
    case State::kAllocated: return receiver ? "waiting for credit" : "offered, waiting for credit";
    case State::kAdvertised: return receiver ? "advertised, waiting for the sender" : "advertised, to post";
    case State::kPosted: return "posted";
    case State::kInFlight: return "on the wire";
    case State::kRemoteDone: return "landed to verified";
    case State::kVerified: return "verified to committed";
    case State::kCommitted: return "committed, held";
    case State::kRetrying: return "retrying";
    case State::kAborted: return "aborted, held";
    case State::kReleased: return "released";
  }
  return "?";
}

void collectTrace(const std::string& engineName, std::span<const telemetry::TraceEvent> events,
                  size_t maxKept) {
  using telemetry::jsonEscape;
  using telemetry::timelineUs;
  std::vector<std::string> out;  // this engine's objects
  const int pid = static_cast<int>(getpid());
  const int track = telemetry::timelineTrack();
  out.push_back("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
                    ",\"args\":{\"name\":\"pact " + std::to_string(pid) + "\"}}");
  // Each transfer (role, key) is one async track: its id is the track and a serial. Not the peer:
  // a receiver's transfer learns its peer after its first event.
  using Id = std::tuple<uint8_t, uint64_t, uint64_t, uint32_t>;
  std::map<Id, std::pair<uint64_t, const telemetry::TraceEvent*>> open;  // -> (async id, last event)
  uint64_t serial = 0;
  const std::string cat = "engine " + jsonEscape(engineName);
  for (const telemetry::TraceEvent& e : events) {
    const Id id{e.role, e.key.requestId, e.key.transferId, e.key.generation};
    auto [it, fresh] = open.try_emplace(id, 0, nullptr);
    if (fresh) it->second.first = static_cast<uint64_t>(track) << 40 | ++serial;
    const telemetry::TraceEvent* prev = it->second.second;
    it->second.second = &e;
    if (prev == nullptr) continue;
    const std::string common =
        ",\"cat\":\"" + cat + "\",\"id\":\"0x" + [&] {
          char b[24];
          std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(it->second.first));
          return std::string(b);
        }() + "\",\"pid\":" + std::to_string(pid) + ",\"tid\":" + std::to_string(track);
    const std::string args =
        "\"args\":{\"request_id\":" + std::to_string(e.key.requestId) + ",\"transfer_id\":" +
        std::to_string(e.key.transferId) + ",\"model_epoch\":" + std::to_string(e.key.modelEpoch) +
        ",\"generation\":" + std::to_string(e.key.generation) + ",\"peer\":" + std::to_string(e.peer) +
        ",\"role\":\"" + (e.role == static_cast<uint8_t>(Role::kReceiver) ? "receiver" : "sender") +
        "\",\"engine\":\"" + jsonEscape(engineName) + "\"}";
    const std::string name = phaseName(prev->state, prev->role);
    out.push_back("{\"ph\":\"b\",\"name\":\"" + name + "\",\"ts\":" + timelineUs(prev->timeNs) + common + "," + args + "}");
    out.push_back("{\"ph\":\"e\",\"name\":\"" + name + "\",\"ts\":" + timelineUs(e.timeNs) + common + "}");
    if (static_cast<State>(e.state) == State::kAborted)
      out.push_back("{\"ph\":\"n\",\"name\":\"abort: " + std::string(eventName(static_cast<Event>(e.event))) +
                        "\",\"ts\":" + timelineUs(e.timeNs) + common + "," + args + "}");
  }
  out.push_back("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid) + ",\"tid\":" +
                    std::to_string(track) + ",\"args\":{\"name\":\"" + cat + "\"}}");
  telemetry::addToTimeline(std::move(out), maxKept);
}

}  // namespace pact::engine
