#include "engine/trace_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "common/replace_file.h"
#include "engine/state.h"
#include "engine/transfer.h"

namespace pact::engine {

namespace {

// What the file holds: each destroyed engine's Trace Event JSON objects, oldest engine first.
// Bounded (collectTrace's maxKept), so a process that creates and destroys engines for days
// keeps a few engines' worth, not all.
std::mutex gMu;
std::deque<std::vector<std::string>> gEngines;
size_t gKept = 0, gDroppedEngines = 0;
int gTracks = 0;

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out;
}

std::string us(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1000.0);
  return buf;
}

}  // namespace

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
  std::lock_guard lock(gMu);
  std::vector<std::string> out;  // this engine's objects
  const int pid = static_cast<int>(getpid());
  const int track = ++gTracks;
  out.push_back("{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" + std::to_string(pid) +
                    ",\"args\":{\"name\":\"pact " + std::to_string(pid) + "\"}}");
  // Each transfer (role, key) is one async track: its id is the track and a serial. Not the peer:
  // a receiver's transfer learns its peer after its first event.
  using Id = std::tuple<uint8_t, uint64_t, uint64_t, uint32_t>;
  std::map<Id, std::pair<uint64_t, const telemetry::TraceEvent*>> open;  // -> (async id, last event)
  uint64_t serial = 0;
  const std::string cat = "engine " + escape(engineName);
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
        "\",\"engine\":\"" + escape(engineName) + "\"}";
    const std::string name = phaseName(prev->state, prev->role);
    out.push_back("{\"ph\":\"b\",\"name\":\"" + name + "\",\"ts\":" + us(prev->timeNs) + common + "," + args + "}");
    out.push_back("{\"ph\":\"e\",\"name\":\"" + name + "\",\"ts\":" + us(e.timeNs) + common + "}");
    if (static_cast<State>(e.state) == State::kAborted)
      out.push_back("{\"ph\":\"n\",\"name\":\"abort: " + std::string(eventName(static_cast<Event>(e.event))) +
                        "\",\"ts\":" + us(e.timeNs) + common + "," + args + "}");
  }
  out.push_back("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + std::to_string(pid) + ",\"tid\":" +
                    std::to_string(track) + ",\"args\":{\"name\":\"" + cat + "\"}}");
  gKept += out.size();
  gEngines.push_back(std::move(out));
  while (gKept > maxKept && gEngines.size() > 1) {
    gKept -= gEngines.front().size();
    gEngines.pop_front();
    ++gDroppedEngines;
  }
}

bool writeTraceFile(const std::string& path, std::string* error) {
  std::lock_guard lock(gMu);
  return replaceFile(
      path,
      [&](std::FILE* f) {
        bool ok = std::fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"engines_dropped\":%zu},\"traceEvents\":[\n",
                               gDroppedEngines) > 0;
        const char* sep = "";
        for (const auto& engine : gEngines)
          for (const std::string& e : engine) {
            ok = ok && std::fputs(sep, f) >= 0 && std::fputs(e.c_str(), f) >= 0;
            sep = ",\n";
          }
        return ok && std::fputs("\n]}\n", f) >= 0;
      },
      error);
}

}  // namespace pact::engine
