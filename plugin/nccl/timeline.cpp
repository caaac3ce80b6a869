#include "plugin/nccl/timeline.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "telemetry/timeline.h"
#include "telemetry/trace.h"

namespace pact::plugin::timeline {
namespace {

struct Span {
  uint64_t startNs = 0, endNs = 0;
  uintptr_t comm = 0;
  char peer[64] = "";  // "ip:port", cut to fit: no allocation per request
  bool send = false;
  uint64_t bytes = 0;
  uint32_t pieces = 0, laneMask = 0;
  int result = 0;
};

struct State {
  std::atomic<bool> on{false};
  std::mutex mu;
  std::string path;
  size_t keep = 0;
  std::vector<Span> ring;  // the newest `keep`, allocated at the first one
  uint64_t recorded = 0;   // spans ever; ring[recorded % keep] is the next slot
  std::map<uint32_t, int> laneTracks;  // lane -> track
};
// Never destroyed: a request may end after static destructors ran (NCCL's proxy thread).
State& state() {
  static State* s = new State;
  return *s;
}

// The last write, at exit (or when the plugin is unloaded: a shared object's atexit runs at its
// dlclose).
void atExit() {
  std::string error;
  if (state().on.load() && !write("", &error)) PACT_WARN("PACT_TRACE_FILE at exit: %s", error.c_str());
}

}  // namespace

void configure(const std::string& path, size_t keep) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.on.load() || path.empty()) return;  // the first init's parameters stay
  s.path = path;
  s.keep = keep;
  s.on.store(true);
  std::atexit(atExit);
}

bool active() { return state().on.load(std::memory_order_relaxed); }

void posted(void* request, uint64_t bytes) {
  if (!active() || request == nullptr) return;
  auto* r = static_cast<net::Request*>(request);
  r->face.postedNs = telemetry::monotonicNs();
  r->face.bytes = bytes;
}

void ended(const net::Ending& e, const int* sizes, ncclResult_t result) {
  if (!active() || e.face.postedNs == 0) return;
  Span sp;
  sp.startNs = e.face.postedNs;
  sp.endNs = telemetry::monotonicNs();
  sp.comm = reinterpret_cast<uintptr_t>(e.comm);
  if (e.peer != nullptr) {
    const size_t n = std::min(e.peer->size(), sizeof sp.peer - 1);
    std::memcpy(sp.peer, e.peer->data(), n);
    sp.peer[n] = '\0';
  }
  sp.send = e.send;
  sp.bytes = e.face.bytes;
  if (!e.send && sizes != nullptr && result == ncclSuccess) {  // what arrived
    sp.bytes = 0;
    for (int i = 0; i < e.nbuffers; ++i) sp.bytes += static_cast<uint64_t>(sizes[i] > 0 ? sizes[i] : 0);
  }
  sp.pieces = e.pieces;
  sp.laneMask = e.laneMask;
  sp.result = result;
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.ring.empty()) s.ring.resize(s.keep);
  s.ring[s.recorded++ % s.keep] = sp;
}

bool write(const std::string& path, std::string* error) {
  State& s = state();
  std::vector<std::string> out;
  std::string target;
  {
    std::lock_guard lock(s.mu);
    if (!s.on.load()) {
      *error = "PACT_TRACE_FILE is not set: no request was recorded";
      return false;
    }
    target = path.empty() ? s.path : path;
    const std::string pid = std::to_string(getpid());
    uint64_t serial = 0;
    const uint64_t kept = std::min<uint64_t>(s.recorded, s.keep);
    for (uint64_t k = s.recorded - kept; k < s.recorded; ++k) {  // oldest first
      const Span& sp = s.ring[k % s.keep];
      ++serial;
      for (uint32_t lane = 0; lane < 32; ++lane) {
        if ((sp.laneMask & (1u << lane)) == 0) continue;
        auto [it, fresh] = s.laneTracks.try_emplace(lane, 0);
        if (fresh) it->second = telemetry::timelineTrack();
        const std::string tid = std::to_string(it->second);
        char id[40];
        std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(static_cast<uint64_t>(it->second) << 40 | serial));
        const std::string name = sp.send ? "isend" : "irecv";
        const std::string common = ",\"cat\":\"plugin\",\"id\":\"" + std::string(id) + "\",\"pid\":" + pid + ",\"tid\":" + tid;
        char comm[24];
        std::snprintf(comm, sizeof comm, "0x%llx", static_cast<unsigned long long>(sp.comm));
        out.push_back("{\"ph\":\"b\",\"name\":\"" + name + "\",\"ts\":" + telemetry::timelineUs(sp.startNs) + common +
                      ",\"args\":{\"comm\":\"" + comm + "\",\"peer\":\"" + telemetry::jsonEscape(sp.peer) +
                      "\",\"bytes\":" + std::to_string(sp.bytes) + ",\"pieces\":" + std::to_string(sp.pieces) +
                      ",\"lanes\":" + std::to_string(__builtin_popcount(sp.laneMask)) + ",\"lane\":" +
                      std::to_string(lane) + ",\"result\":" + std::to_string(sp.result) + "}}");
        out.push_back("{\"ph\":\"e\",\"name\":\"" + name + "\",\"ts\":" + telemetry::timelineUs(sp.endNs) + common + "}");
      }
    }
    for (const auto& [lane, track] : s.laneTracks)
      out.push_back("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" + pid + ",\"tid\":" + std::to_string(track) +
                    ",\"args\":{\"name\":\"plugin lane " + std::to_string(lane) + "\"}}");
    if (s.recorded > kept)
      out.push_back("{\"ph\":\"M\",\"name\":\"plugin_requests_dropped\",\"pid\":" + pid + ",\"args\":{\"dropped\":" +
                    std::to_string(s.recorded - kept) + "}}");
  }
  // The plugin's requests replace what it handed in before (the spans are all still here).
  telemetry::addToTimeline(std::move(out), 4 * s.keep + 64, "plugin");
  return telemetry::writeTimeline(target, error);
}

}  // namespace pact::plugin::timeline
