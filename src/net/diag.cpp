#include "net/diag.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <set>

#include "net/comm.h"

namespace pact::net::diag {
namespace {

std::atomic<bool> gEnabled{false};

double ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The comms open now, for the exit lines; opened and closed counts. Never destroyed: a comm may
// close after static destructors ran (another thread, another library's destructor).
struct Registry {
  std::mutex mu;
  std::set<const Comm*> open;
  uint64_t opened = 0, closed = 0;
};
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

// At exit (or when the plugin is unloaded: a shared object's atexit runs at its dlclose).
void atExit() {
  if (!gEnabled.load()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  for (const Comm* c : r.open) std::fprintf(stderr, "%s\n", line(*c, "open at exit").c_str());
  std::fprintf(stderr, "pact diag: exit: %llu comms opened, %llu closed, %zu still open\n",
               static_cast<unsigned long long>(r.opened), static_cast<unsigned long long>(r.closed),
               r.open.size());
}

}  // namespace

void enable(bool on) {
  gEnabled.store(on);
  static std::once_flag once;
  if (on) std::call_once(once, [] { std::atexit(atExit); });
}
bool enabled() { return gEnabled.load(std::memory_order_relaxed); }

void opened(const Comm& c) {
  if (!enabled()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.open.insert(&c);
  ++r.opened;
}

void closed(const Comm& c) {
  if (!enabled()) return;
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.open.erase(&c) == 0) return;
  ++r.closed;
  std::fprintf(stderr, "%s\n", line(c, "closed").c_str());
}

std::string line(const Comm& c, const char* when) {
  const CommDiag& d = c.diag();
  const auto& k = c.counters();
  char buf[768];
  std::snprintf(buf, sizeof buf,
                "pact diag: %s comm %p %s %s on %s (%s): setup %.3f ms over %u call(s) (%.3f ms inside "
                "pact, %.3f ms between the caller's calls); %llu registration(s), %llu bytes, %.3f ms, "
                "%llu cache hit(s); requests peak %zu of %zu; %llu message(s), %llu piece(s), %llu "
                "fault(s) injected, %llu retransmit(s)",
                c.isSend() ? "send" : "recv", static_cast<const void*>(&c), c.isSend() ? "to" : "from",
                c.peer().c_str(), c.devName().c_str(), when, ms(d.setupTotal), d.setup.calls,
                ms(d.setup.inside), ms(d.setupTotal - d.setup.inside),
                static_cast<unsigned long long>(d.registrations), static_cast<unsigned long long>(d.regBytes),
                ms(d.regTime), static_cast<unsigned long long>(d.regCacheHits), d.requestsPeak,
                c.maxInFlight(), static_cast<unsigned long long>(k.get(telemetry::kMessages)),
                static_cast<unsigned long long>(k.get(telemetry::kPieces)),
                static_cast<unsigned long long>(k.get(telemetry::kCommFaultsInjected)),
                static_cast<unsigned long long>(k.get(telemetry::kRetransmits)));
  std::string out = buf;
  if (const uint64_t failovers = k.get(telemetry::kRailFailovers); failovers != 0) {  // rail failover
    std::snprintf(buf, sizeof buf,
                  "; %llu rail failover(s), %llu recovery(ies) after %.3f ms out, %llu piece(s) (%llu bytes) sent again",
                  static_cast<unsigned long long>(failovers),
                  static_cast<unsigned long long>(k.get(telemetry::kRailRecoveries)),
                  static_cast<double>(k.get(telemetry::kRailDownUs)) / 1000.0,
                  static_cast<unsigned long long>(k.get(telemetry::kRailResentPieces)),
                  static_cast<unsigned long long>(k.get(telemetry::kRailResentBytes)));
    out += buf;
  }
  return out;
}

}  // namespace pact::net::diag
