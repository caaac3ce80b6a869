#include "telemetry/timeline.h"

#include <cstdio>
#include <deque>
#include <mutex>
#include <utility>

#include "common/replace_file.h"
#include "telemetry/shared.h"

namespace pact::telemetry {
namespace {

using State = TimelineState;
using Source = TimelineState::Source;
// Never destroyed, one per process (shared.h): see the header.
State& state() { return shared().timeline; }

}  // namespace

int timelineTrack() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return ++s.tracks;
}

void addToTimeline(std::vector<std::string> objects, size_t maxKept, const std::string& replaceKey) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!replaceKey.empty())
    for (auto it = s.sources.begin(); it != s.sources.end(); ++it)
      if (it->key == replaceKey) {
        s.kept -= it->objects.size();
        s.sources.erase(it);
        break;
      }
  s.kept += objects.size();
  s.sources.push_back(Source{replaceKey, std::move(objects)});
  while (s.kept > maxKept && s.sources.size() > 1) {
    s.kept -= s.sources.front().objects.size();
    s.sources.pop_front();
    ++s.dropped;
  }
}

bool writeTimeline(const std::string& path, std::string* error) {
  State& s = state();
  std::lock_guard lock(s.mu);
  return replaceFile(
      path,
      [&](std::FILE* f) {
        bool ok = std::fprintf(f, "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"sources_dropped\":%zu},\"traceEvents\":[\n",
                               s.dropped) > 0;
        const char* sep = "";
        for (const Source& src : s.sources)
          for (const std::string& e : src.objects) {
            ok = ok && std::fputs(sep, f) >= 0 && std::fputs(e.c_str(), f) >= 0;
            sep = ",\n";
          }
        return ok && std::fputs("\n]}\n", f) >= 0;
      },
      error);
}

std::string jsonEscape(const std::string& s) {
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

std::string timelineUs(uint64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(ns) / 1000.0);
  return buf;
}

}  // namespace pact::telemetry
